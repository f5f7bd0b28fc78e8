package policy

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

func newTestWeighted(t *testing.T, scorers map[string]float64) *Weighted {
	t.Helper()
	cfg := DefaultWeightedConfig()
	cfg.BlockChars = 4
	cfg.Scorers = scorers
	p, err := NewWeighted(cfg)
	require.NoError(t, err)
	p.SetTracer(NewTracer(8, 16, nil))
	return p
}

func TestWeightedWeightsNormalised(t *testing.T) {
	p := newTestWeighted(t, nil)
	w := p.Weights()
	require.InDelta(t, 3.0/7, w[ScorerPrefixAffinity], 1e-12)
	require.InDelta(t, 2.0/7, w[ScorerQueueDepth], 1e-12)
	require.InDelta(t, 2.0/7, w[ScorerKVUtilization], 1e-12)
	require.NotContains(t, w, ScorerLoadBalance)

	p = newTestWeighted(t, map[string]float64{ScorerQueueDepth: 5, ScorerLoadBalance: 0})
	require.Equal(t, map[string]float64{ScorerQueueDepth: 1}, p.Weights(), "zero weights drop out")
}

func TestWeightedOnlyRatiosMatter(t *testing.T) {
	small := newTestWeighted(t, map[string]float64{ScorerQueueDepth: 3, ScorerKVUtilization: 2})
	large := newTestWeighted(t, map[string]float64{ScorerQueueDepth: 30, ScorerKVUtilization: 20})
	cs := cands(4, 0, 2)
	cs[1].KVUtilization = 0.9
	for _, p := range []*Weighted{small, large} {
		p.Pick(&Request{}, cs)
	}
	a, b := lastTrace(t, small), lastTrace(t, large)
	require.Equal(t, a.Chosen.ID, b.Chosen.ID)
	for i := range a.Top {
		require.InDelta(t, a.Top[i].Score, b.Top[i].Score, 1e-12)
	}
}

func TestWeightedScorers(t *testing.T) {
	p := newTestWeighted(t, nil)
	tests := []struct {
		name  string
		kind  scorerKind
		cands []Candidate
		want  []float64
	}{
		{"queue-depth min-max", scoreQueueDepth,
			[]Candidate{{ID: "a", InFlight: 0}, {ID: "b", Waiting: 3, InFlight: 2}, {ID: "c", Waiting: 10}},
			[]float64{1, 0.5, 0}},
		{"queue-depth all equal", scoreQueueDepth,
			[]Candidate{{ID: "a", InFlight: 4}, {ID: "b", Waiting: 4}, {ID: "c", Waiting: 2, InFlight: 2}},
			[]float64{1, 1, 1}},
		{"queue-depth single", scoreQueueDepth, []Candidate{{ID: "a", InFlight: 9}}, []float64{1}},
		{"kv-utilization", scoreKVUtilization,
			[]Candidate{{ID: "a", KVUtilization: 0}, {ID: "b", KVUtilization: 0.25}, {ID: "c", KVUtilization: 1}},
			[]float64{1, 0.75, 0}},
		{"kv-utilization unknown reads as empty", scoreKVUtilization,
			[]Candidate{{ID: "a", KVUtilization: 0.5}, {ID: "b", KVUtilization: 0.5, KVUnknown: true}},
			[]float64{0.5, 1}},
		{"load-balance", scoreLoadBalance,
			[]Candidate{{ID: "a", InFlight: 0}, {ID: "b", InFlight: 1}, {ID: "c", InFlight: 3}},
			[]float64{1, 0.5, 0.25}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := make([]float64, len(tt.cands))
			p.score(tt.kind, &Request{}, nil, tt.cands, out)
			require.InDeltaSlice(t, tt.want, out, 1e-12)
		})
	}
}

func TestWeightedPrefixAffinity(t *testing.T) {
	p := newTestWeighted(t, map[string]float64{ScorerPrefixAffinity: 1})
	cs := cands(0, 0, 0)
	hs := mustHashes("aaaabbbbccccdddd", 4)
	out := make([]float64, 3)

	p.score(scorePrefixAffinity, &Request{}, hs, cs, out)
	require.Equal(t, []float64{0, 0, 0}, out)

	p.index.record("r1", hs[:2])
	p.index.record("r2", hs[3:]) // present but not leading: still counts
	p.score(scorePrefixAffinity, &Request{}, hs, cs, out)
	require.Equal(t, []float64{0, 0.5, 0.25}, out)

	p.score(scorePrefixAffinity, &Request{}, nil, cs, out)
	require.Equal(t, []float64{0, 0, 0}, out, "empty prompt scores 0")
}

func TestWeightedUpdatesIndexAfterDecision(t *testing.T) {
	p := newTestWeighted(t, nil)
	req := &Request{Prompt: "aaaabbbbcccc"}
	cs := cands(1, 0, 1)
	require.Equal(t, "r1", cs[p.Pick(req, cs)].ID, "cold: queue-depth decides")
	// Now r1 is warm: prefix affinity (weight 3/7) outweighs its extra load.
	cs = cands(1, 2, 1)
	require.Equal(t, "r1", cs[p.Pick(req, cs)].ID)
	r := lastTrace(t, p)
	require.InDelta(t, 3.0/7+2.0/7, r.Chosen.Score, 1e-12) // prefix 1, queue-depth 0, kv 1
}

func TestWeightedTiesRotate(t *testing.T) {
	p := newTestWeighted(t, nil)
	cs := cands(0, 0, 0)
	var got []string
	for i := range 3 { // distinct prompts: nobody is warm
		got = append(got, cs[p.Pick(&Request{Prompt: fmt.Sprint(i, "-question")}, cs)].ID)
	}
	require.Equal(t, []string{"r0", "r1", "r2"}, got)
}

func TestWeightedTotalsInUnitInterval(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	all := map[string]float64{ScorerPrefixAffinity: 1, ScorerQueueDepth: 2, ScorerKVUtilization: 3, ScorerLoadBalance: 4}
	p := newTestWeighted(t, all)
	for i := range 500 {
		cs := make([]Candidate, 1+rng.IntN(8))
		for j := range cs {
			cs[j] = Candidate{
				ID:            fmt.Sprint("r", j),
				InFlight:      rng.IntN(50),
				Waiting:       rng.IntN(50),
				KVUtilization: rng.Float64()*1.4 - 0.2, // out-of-range readings are clamped
			}
		}
		p.Pick(&Request{Prompt: fmt.Sprint("prompt ", i%13)}, cs)
		r := lastTrace(t, p)
		for _, c := range r.Top {
			require.GreaterOrEqual(t, c.Score, 0.0)
			require.LessOrEqual(t, c.Score, 1.0+1e-12)
		}
		require.Zero(t, r.Regret, "weighted always takes the best total")
	}
}
