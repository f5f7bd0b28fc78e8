package policy

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func newTestPrefixCache(t *testing.T, mutate func(*PrefixCacheConfig)) *PrefixCache {
	t.Helper()
	cfg := DefaultPrefixCacheConfig()
	cfg.BlockChars = 4
	if mutate != nil {
		mutate(&cfg)
	}
	p, err := NewPrefixCache(cfg)
	require.NoError(t, err)
	p.SetTracer(NewTracer(8, 16, nil))
	return p
}

// seed records prompt on replica id, as if it had been picked there.
func (p *PrefixCache) seed(id, prompt string) {
	hs, _ := appendBlockHashes(nil, prompt, p.cfg.BlockChars)
	p.index.record(id, hs)
}

const prompt3 = "aaaabbbbcccc" // three 4-char blocks

func TestPrefixCacheImbalance(t *testing.T) {
	tests := []struct {
		name     string
		inFlight []int
		want     string
		note     string
	}{
		{"max-min above count: least-request", []int{17, 0, 3}, "r1", "imbalance"},
		{"max-min equal to count: prefix still counts", []int{16, 0, 0}, "r0", "prefix-match"},
		{"balanced: prefix", []int{2, 0, 1}, "r0", "prefix-match"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newTestPrefixCache(t, func(c *PrefixCacheConfig) { c.LoadFactor = 10 }) // keep the stddev filter out of the way
			p.seed("r0", prompt3)
			cs := cands(tt.inFlight...)
			require.Equal(t, tt.want, cs[p.Pick(&Request{Prompt: prompt3}, cs)].ID)
			require.Equal(t, tt.note, lastTrace(t, p).Note)
		})
	}
}

func TestPrefixCacheLoadFilter(t *testing.T) {
	// InFlight 10,0,0,0,0,0,0,0: mean 1.25, stddev ≈ 3.31, so the limit with
	// the default load factor 2 is ≈ 7.86 and r0 is over it.
	t.Run("only match overloaded: least-request", func(t *testing.T) {
		p := newTestPrefixCache(t, nil)
		p.seed("r0", prompt3)
		cs := cands(10, 0, 0, 0, 0, 0, 0, 0)
		got := pickIDs(p, &Request{Prompt: prompt3}, cs, 1)
		require.Equal(t, []string{"r1"}, got)
		r := lastTrace(t, p)
		require.Equal(t, "match-overloaded", r.Note)
		require.Equal(t, 1.0, r.Regret, "gave up the whole prefix")
	})
	t.Run("best match overloaded: next match", func(t *testing.T) {
		p := newTestPrefixCache(t, nil)
		p.seed("r0", prompt3)
		p.seed("r5", prompt3[:4]) // one block of three
		cs := cands(10, 0, 0, 0, 0, 0, 0, 0)
		require.Equal(t, "r5", cs[p.Pick(&Request{Prompt: prompt3}, cs)].ID)
		r := lastTrace(t, p)
		require.Equal(t, "prefix-match", r.Note)
		require.InDelta(t, 2.0/3, r.Regret, 1e-9)
	})
	t.Run("at the limit passes", func(t *testing.T) {
		// InFlight 4,0: mean 2, stddev 2; load factor 1 gives limit 4 and
		// InFlight 4 <= 4 qualifies.
		p := newTestPrefixCache(t, func(c *PrefixCacheConfig) { c.LoadFactor = 1 })
		p.seed("r0", prompt3)
		cs := cands(4, 0)
		require.Equal(t, "r0", cs[p.Pick(&Request{Prompt: prompt3}, cs)].ID)
	})
	t.Run("all equal load: stddev 0 still passes", func(t *testing.T) {
		p := newTestPrefixCache(t, nil)
		p.seed("r2", prompt3)
		cs := cands(3, 3, 3)
		require.Equal(t, "r2", cs[p.Pick(&Request{Prompt: prompt3}, cs)].ID)
	})
}

func TestPrefixCacheMatchOrdering(t *testing.T) {
	t.Run("longer match wins over lower load", func(t *testing.T) {
		p := newTestPrefixCache(t, nil)
		p.seed("r0", prompt3[:4])
		p.seed("r1", prompt3[:8])
		cs := cands(0, 2, 0)
		require.Equal(t, "r1", cs[p.Pick(&Request{Prompt: prompt3}, cs)].ID)
	})
	t.Run("equal match: lower load wins", func(t *testing.T) {
		p := newTestPrefixCache(t, nil)
		p.seed("r0", prompt3)
		p.seed("r2", prompt3)
		cs := cands(2, 0, 1)
		require.Equal(t, "r2", cs[p.Pick(&Request{Prompt: prompt3}, cs)].ID)
	})
	t.Run("equal match and load: rotate", func(t *testing.T) {
		p := newTestPrefixCache(t, nil)
		p.seed("r1", prompt3)
		p.seed("r2", prompt3)
		cs := cands(1, 1, 1)
		require.Equal(t, []string{"r1", "r2", "r1"}, pickIDs(p, &Request{Prompt: prompt3}, cs, 3))
	})
	t.Run("only leading runs count", func(t *testing.T) {
		p := newTestPrefixCache(t, nil)
		hs, _ := appendBlockHashes(nil, prompt3, 4)
		p.index.record("r0", hs[1:]) // blocks 2 and 3 but not 1
		cs := cands(0, 0)
		p.Pick(&Request{Prompt: prompt3}, cs)
		require.Equal(t, "no-match", lastTrace(t, p).Note)
	})
}

func TestPrefixCacheNoMatch(t *testing.T) {
	p := newTestPrefixCache(t, nil)
	cs := cands(0, 0, 0)
	// Different prompts, so nothing matches: least-request with rotation.
	var got []string
	for _, prompt := range []string{"one.", "two.", "three"} {
		got = append(got, cs[p.Pick(&Request{Prompt: prompt}, cs)].ID)
		require.Equal(t, "no-match", lastTrace(t, p).Note)
	}
	require.Equal(t, []string{"r0", "r1", "r2"}, got)

	require.Equal(t, "r1", cs[p.Pick(&Request{Prompt: "zzzz"}, cands(2, 0, 1))].ID)
}

func TestPrefixCacheRecordsAfterPick(t *testing.T) {
	p := newTestPrefixCache(t, nil)
	cs := cands(1, 0, 1)
	require.Equal(t, "r1", cs[p.Pick(&Request{Prompt: prompt3}, cs)].ID)
	hs, _ := appendBlockHashes(nil, prompt3, 4)
	require.Equal(t, 3, p.index.leadingMatch("r1", hs))

	// The follow-up turn extends the prompt and finds r1 although it is
	// now the busiest.
	cs = cands(0, 2, 0)
	require.Equal(t, "r1", cs[p.Pick(&Request{Prompt: prompt3 + "dddd"}, cs)].ID)
	r := lastTrace(t, p)
	require.Equal(t, "prefix-match", r.Note)
	require.Equal(t, 0.75, r.Chosen.Score)
	require.Zero(t, r.Regret)
}

func TestPrefixCacheEmptyPrompt(t *testing.T) {
	p := newTestPrefixCache(t, nil)
	cs := cands(0, 0)
	require.Equal(t, []string{"r0", "r1"}, pickIDs(p, &Request{}, cs, 2))
}
