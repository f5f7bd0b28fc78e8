package policy

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

func kvCands(kv []float64, inFlight ...int) []Candidate {
	if inFlight == nil {
		inFlight = make([]int, len(kv))
	}
	return signalCands(inFlight, func(c *Candidate, i int) { c.KVUtilization = kv[i] })
}

func TestLeastKVCache(t *testing.T) {
	tests := []struct {
		name  string
		cs    []Candidate
		picks int
		want  []string
	}{
		{"emptiest cache wins over fewer requests", kvCands([]float64{0.6, 0.2, 0.9}, 0, 7, 0), 2, []string{"r1", "r1"}},
		{"equal cache: fewer in flight", kvCands([]float64{0.3, 0.3, 0.8}, 4, 2, 0), 2, []string{"r1", "r1"}},
		{"full tie rotates among the tied only", kvCands([]float64{0.1, 0.5, 0.1}, 1, 0, 1), 4, []string{"r0", "r2", "r0", "r2"}},
		{"one candidate", kvCands([]float64{0.99}), 2, []string{"r0", "r0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, pickIDs(NewLeastKVCache(), &Request{}, tt.cs, tt.picks))
		})
	}
}

func TestLeastKVCacheFallsBackToLeastRequest(t *testing.T) {
	// By cache r0 would win; by in-flight count r2 does.
	readings := func(fresh ...bool) []Candidate {
		return signalCands([]int{5, 3, 1}, func(c *Candidate, i int) {
			c.KVUtilization, c.Fresh = []float64{0.1, 0.5, 0.9}[i], fresh[i]
		})
	}
	nan := readings(true, true, true)
	nan[0].KVUtilization = math.NaN()
	unknown := readings(true, true, true) // r0's engine exports no KV usage: its 0.1 means nothing
	unknown[0].KVUnknown = true
	tests := []struct {
		name string
		cs   []Candidate
	}{
		{"one stale candidate", readings(true, false, true)},
		{"the best reading is the stale one", readings(false, true, true)},
		{"every candidate stale", readings(false, false, false)},
		{"NaN reading", nan},
		{"an engine without KV usage", unknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := withTracer(NewLeastKVCache())
			require.Equal(t, "r2", tt.cs[p.Pick(&Request{}, tt.cs)].ID)
			r := lastTrace(t, p)
			require.Equal(t, noteFallback, r.Note)
			require.Equal(t, float64(1), r.Top[0].Score, "a fallback is traced by in-flight count")
		})
	}
	t.Run("fallback ties rotate", func(t *testing.T) {
		cs := signalCands([]int{2, 2}, func(c *Candidate, _ int) { c.Fresh = false })
		require.Equal(t, []string{"r0", "r1", "r0"}, pickIDs(NewLeastKVCache(), &Request{}, cs, 3))
	})
	t.Run("one stale candidate alone", func(t *testing.T) {
		cs := kvCands([]float64{0.7})
		cs[0].Fresh = false
		require.Equal(t, []string{"r0", "r0"}, pickIDs(NewLeastKVCache(), &Request{}, cs, 2))
	})
}

// The pool passes only the replicas that may take the request; the best
// reading among the others does not matter.
func TestLeastKVCacheOnlyAmongCandidates(t *testing.T) {
	all := kvCands([]float64{0.1, 0.4, 0.3})
	withoutBest := all[1:]
	require.Equal(t, "r2", withoutBest[NewLeastKVCache().Pick(&Request{}, withoutBest)].ID)
}

func TestLeastKVCacheTrace(t *testing.T) {
	p := withTracer(NewLeastKVCache())
	p.Pick(&Request{}, kvCands([]float64{0.5, 0.25, 0.75}, 0, 3, 1))
	r := lastTrace(t, p)
	require.Empty(t, r.Note)
	require.True(t, r.LowerIsBetter)
	require.Equal(t, []TraceCandidate{{"r1", 0.25, 3}, {"r0", 0.5, 0}, {"r2", 0.75, 1}}, r.Top)
}

func TestLeastGPUCacheIsAnAlias(t *testing.T) {
	for _, name := range []string{nameLeastKVCache, nameLeastGPUCache} {
		cfg := DefaultConfig()
		cfg.Name = name
		p, err := New(cfg, Env{})
		require.NoError(t, err)
		cs := kvCands([]float64{0.9, 0.2}, 0, 9)
		require.Equal(t, 1, p.Pick(&Request{}, cs), name)
	}
}
