package policy

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func newTestThroughput(t *testing.T, promptWeight float64) *Throughput {
	t.Helper()
	p, err := NewThroughput(ThroughputConfig{PromptTokenWeight: promptWeight})
	require.NoError(t, err)
	return withTracer(p)
}

// rateCands gives each candidate its prompt and output tokens per second.
func rateCands(prompt, gen []float64, inFlight ...int) []Candidate {
	if inFlight == nil {
		inFlight = make([]int, len(prompt))
	}
	return signalCands(inFlight, func(c *Candidate, i int) {
		c.PromptTokensPerSec, c.GenerationTokensPerSec, c.Rates = prompt[i], gen[i], true
	})
}

func TestThroughput(t *testing.T) {
	tests := []struct {
		name   string
		weight float64
		cs     []Candidate
		picks  int
		want   []string
		scores map[string]float64
	}{
		{"fewest tokens per second", 1, rateCands([]float64{300, 50, 400}, []float64{10, 300, 0}, 5, 0, 0), 1,
			[]string{"r0"}, map[string]float64{"r0": 310, "r1": 350, "r2": 400}},
		// Weighing prompts 2 (AIBrix) turns r0's prompt-heavy work into the larger.
		{"prompt weight", 2, rateCands([]float64{300, 50}, []float64{10, 300}), 1,
			[]string{"r1"}, map[string]float64{"r0": 610, "r1": 400}},
		{"prompt weight 0 ranks output alone", 0, rateCands([]float64{0, 900}, []float64{20, 10}), 1, []string{"r1"}, nil},
		{"equal rates: fewer in flight", 1, rateCands([]float64{10, 10, 0}, []float64{0, 0, 50}, 3, 1, 0), 2,
			[]string{"r1", "r1"}, nil},
		{"idle pool rotates", 1, rateCands([]float64{0, 0}, []float64{0, 0}), 3, []string{"r0", "r1", "r0"}, nil},
		{"one candidate", 1, rateCands([]float64{5000}, []float64{5000}), 2, []string{"r0", "r0"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newTestThroughput(t, tt.weight)
			require.Equal(t, tt.want, pickIDs(p, &Request{}, tt.cs, tt.picks))
			if tt.scores != nil {
				require.Equal(t, tt.scores, traceScores(t, p))
			}
		})
	}
}

func TestThroughputFallsBackToLeastRequest(t *testing.T) {
	// By rate r0 would win; by in-flight count r1 does.
	base := func() []Candidate { return rateCands([]float64{1, 500}, []float64{1, 500}, 6, 2) }
	tests := []struct {
		name   string
		mutate func([]Candidate)
	}{
		{"no rate yet", func(cs []Candidate) { cs[0].Rates = false }},
		{"stale", func(cs []Candidate) { cs[1].Fresh = false }},
		{"no candidate measured", func(cs []Candidate) { cs[0].Rates, cs[1].Rates = false, false }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cs := base()
			tt.mutate(cs)
			p := newTestThroughput(t, 1)
			require.Equal(t, "r1", cs[p.Pick(&Request{}, cs)].ID)
			require.Equal(t, noteFallback, lastTrace(t, p).Note)
		})
	}
}

func TestThroughputConfig(t *testing.T) {
	require.NoError(t, DefaultThroughputConfig().ValidateAt("p"))
	require.EqualError(t, ThroughputConfig{PromptTokenWeight: -1}.ValidateAt("p"),
		"p.prompt_token_weight: must be a finite number >= 0, got -1")
}
