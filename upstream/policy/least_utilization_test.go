package policy

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func newTestLeastUtilization(t *testing.T, seqs int) *LeastUtilization {
	t.Helper()
	p, err := NewLeastUtilization(LeastUtilizationConfig{MaxNumSeqs: seqs})
	require.NoError(t, err)
	return withTracer(p)
}

func utilCands(kv []float64, running []int, inFlight ...int) []Candidate {
	if inFlight == nil {
		inFlight = make([]int, len(kv))
	}
	return signalCands(inFlight, func(c *Candidate, i int) { c.KVUtilization, c.Running = kv[i], running[i] })
}

func TestLeastUtilization(t *testing.T) {
	tests := []struct {
		name   string
		cs     []Candidate
		picks  int
		want   []string
		scores map[string]float64
	}{
		// r0: max(0.2, 8/10) = 0.8 (batch-bound); r1: max(0.5, 2/10) = 0.5
		// (cache-bound); r2: max(0.7, 0) = 0.7.
		{"the scarcer capacity counts", utilCands([]float64{0.2, 0.5, 0.7}, []int{8, 2, 0}), 1, []string{"r1"},
			map[string]float64{"r0": 0.8, "r1": 0.5, "r2": 0.7}},
		{"equal utilisation: fewer in flight", utilCands([]float64{0.4, 0.1, 0.9}, []int{0, 4, 0}, 3, 1, 0), 2,
			[]string{"r1", "r1"}, nil},
		// r0's engine exports no KV usage: its batch slots alone, 3/10, not
		// max(0, 0.3) read as an empty cache; r1 is cache-bound at 0.5.
		{"unknown KV: batch slots alone", func() []Candidate {
			cs := utilCands([]float64{0, 0.5}, []int{3, 1})
			cs[0].KVUnknown = true
			return cs
		}(), 1, []string{"r0"}, map[string]float64{"r0": 0.3, "r1": 0.5}},
		{"idle pool rotates", utilCands([]float64{0, 0, 0}, []int{0, 0, 0}), 3, []string{"r0", "r1", "r2"}, nil},
		{"one candidate", utilCands([]float64{1}, []int{10}), 2, []string{"r0", "r0"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newTestLeastUtilization(t, 10)
			require.Equal(t, tt.want, pickIDs(p, &Request{}, tt.cs, tt.picks))
			if tt.scores != nil {
				require.Equal(t, tt.scores, traceScores(t, p))
			}
		})
	}
}

func TestLeastUtilizationFallsBackToLeastRequest(t *testing.T) {
	// By utilisation r0 would win; by in-flight count r1 does.
	cs := utilCands([]float64{0.1, 0.9}, []int{0, 0}, 4, 2)
	for _, stale := range []int{0, 1} {
		cs := append([]Candidate(nil), cs...)
		cs[stale].Fresh = false
		p := newTestLeastUtilization(t, 10)
		require.Equal(t, "r1", cs[p.Pick(&Request{}, cs)].ID, "candidate %d stale", stale)
		require.Equal(t, noteFallback, lastTrace(t, p).Note)
	}
}

func TestLeastUtilizationConfig(t *testing.T) {
	require.NoError(t, DefaultLeastUtilizationConfig().ValidateAt("p"))
	require.EqualError(t, LeastUtilizationConfig{}.ValidateAt("p"), "p.max_num_seqs: must be in [1, 1048576], got 0")
	_, err := NewLeastUtilization(LeastUtilizationConfig{MaxNumSeqs: -1})
	require.Error(t, err)
}
