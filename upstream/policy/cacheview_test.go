package policy

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// fakeView is a CacheView answering for the replicas it lists.
type fakeView map[string]float64

func (v fakeView) Cached(id string) (float64, bool) {
	s, ok := v[id]
	return s, ok
}

var prefixAware = []string{"prefix-cache", "prefix-cache-preble", "lmetric", "weighted"}

func newNamed(t *testing.T, name string) Picker {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Name = name
	p, err := New(cfg, Env{})
	require.NoError(t, err)
	return p
}

// The view's answer wins over the guess: the replica the events say holds
// the prompt gets it, though the policy never sent it there.
func TestPrefixPoliciesReadTheCacheView(t *testing.T) {
	prompt := strings.Repeat("the shared system prompt. ", 80)
	for _, name := range prefixAware {
		t.Run(name, func(t *testing.T) {
			p := newNamed(t, name)
			cs := cands(0, 0, 0)
			req := &Request{Prompt: prompt, InputTokens: 500, Cache: fakeView{"r0": 0, "r1": 0.9, "r2": 0}}
			require.Equal(t, []string{"r1", "r1", "r1"}, pickIDs(p, req, cs, 3))
		})
	}
}

// A replica the view does not know is scored by the guess; the others by
// the view.
func TestPrefixPoliciesFallBackPerReplica(t *testing.T) {
	prompt := strings.Repeat("another shared prefix. ", 80)
	for _, name := range prefixAware {
		t.Run(name, func(t *testing.T) {
			p := newNamed(t, name)
			cs := cands(0, 0, 0)
			// The guess learns that r2 was sent the prompt.
			p.Pick(&Request{Prompt: prompt, InputTokens: 500}, cs[2:])
			// The view knows r0 and r1 (cold) but not r2.
			req := &Request{Prompt: prompt, InputTokens: 500, Cache: fakeView{"r0": 0, "r1": 0}}
			require.Equal(t, "r2", cs[p.Pick(req, cs)].ID)
			// And a view saying r2 holds nothing overrides the guess.
			req.Cache = fakeView{"r0": 0, "r1": 0.8, "r2": 0}
			require.Equal(t, "r1", cs[p.Pick(req, cs)].ID)
		})
	}
}
