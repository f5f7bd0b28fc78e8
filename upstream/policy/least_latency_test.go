package policy

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func newTestLeastLatency(t *testing.T, outputTokens int) *LeastLatency {
	t.Helper()
	p, err := NewLeastLatency(LeastLatencyConfig{OutputTokens: outputTokens})
	require.NoError(t, err)
	return withTracer(p)
}

// latencyCands gives each candidate its mean TTFT and TPOT in seconds.
func latencyCands(ttft, tpot []float64, inFlight ...int) []Candidate {
	if inFlight == nil {
		inFlight = make([]int, len(ttft))
	}
	return signalCands(inFlight, func(c *Candidate, i int) {
		c.MeanTTFT, c.MeanTPOT, c.HasTTFT, c.HasTPOT = ttft[i], tpot[i], true, true
	})
}

func TestLeastLatency(t *testing.T) {
	// r0 answers first fast but decodes slowly; r1 the other way round.
	ttft, tpot := []float64{0.1, 0.5}, []float64{0.02, 0.01}
	tests := []struct {
		name   string
		tokens int
		cs     []Candidate
		picks  int
		want   []string
		scores map[string]float64
	}{
		// 0.1 + 100·0.02 = 2.1 against 0.5 + 100·0.01 = 1.5.
		{"long answers: decode speed wins", 100, latencyCands(ttft, tpot), 1, []string{"r1"},
			map[string]float64{"r0": 2.1, "r1": 1.5}},
		// 0.1 + 10·0.02 = 0.3 against 0.5 + 10·0.01 = 0.6.
		{"short answers: first token wins", 10, latencyCands(ttft, tpot), 1, []string{"r0"}, nil},
		{"output_tokens 0: TTFT alone", 0, latencyCands(ttft, tpot), 1, []string{"r0"},
			map[string]float64{"r0": 0.1, "r1": 0.5}},
		{"equal latency: fewer in flight", 100, latencyCands([]float64{0.2, 0.2, 0.9}, []float64{0.01, 0.01, 0.01}, 5, 1, 0), 2,
			[]string{"r1", "r1"}, nil},
		{"full tie rotates", 100, latencyCands([]float64{0.2, 0.2}, []float64{0.01, 0.01}), 3, []string{"r0", "r1", "r0"}, nil},
		{"one candidate", 100, latencyCands([]float64{3}, []float64{1}), 2, []string{"r0", "r0"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newTestLeastLatency(t, tt.tokens)
			require.Equal(t, tt.want, pickIDs(p, &Request{}, tt.cs, tt.picks))
			if tt.scores != nil {
				got := traceScores(t, p)
				for id, want := range tt.scores {
					require.InDelta(t, want, got[id], 1e-12, id)
				}
			}
		})
	}
}

func TestLeastLatencyFallsBackToLeastRequest(t *testing.T) {
	// By latency r0 would win; by in-flight count r1 does.
	base := func() []Candidate { return latencyCands([]float64{0.1, 2}, []float64{0.01, 0.1}, 6, 2) }
	tests := []struct {
		name     string
		tokens   int
		mutate   func([]Candidate)
		fallback bool
	}{
		{"never measured", 100, func(cs []Candidate) { cs[1].HasTTFT, cs[1].HasTPOT = false, false }, true},
		{"no TPOT while output tokens count", 100, func(cs []Candidate) { cs[0].HasTPOT = false }, true},
		{"no TPOT is fine for TTFT alone", 0, func(cs []Candidate) { cs[0].HasTPOT = false }, false},
		{"stale", 100, func(cs []Candidate) { cs[0].Fresh = false }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cs := base()
			tt.mutate(cs)
			p := newTestLeastLatency(t, tt.tokens)
			got := cs[p.Pick(&Request{}, cs)].ID
			if tt.fallback {
				require.Equal(t, "r1", got)
				require.Equal(t, noteFallback, lastTrace(t, p).Note)
			} else {
				require.Equal(t, "r0", got)
				require.Empty(t, lastTrace(t, p).Note)
			}
		})
	}
}

func TestLeastLatencyConfig(t *testing.T) {
	require.NoError(t, DefaultLeastLatencyConfig().ValidateAt("p"))
	require.NoError(t, LeastLatencyConfig{}.ValidateAt("p"), "0 ranks by TTFT alone")
	require.EqualError(t, LeastLatencyConfig{OutputTokens: -1}.ValidateAt("p"),
		"p.output_tokens: must be in [0, 1048576], got -1")
}
