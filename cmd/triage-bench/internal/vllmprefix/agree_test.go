package vllmprefix

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestAgree(t *testing.T) {
	p := func(pred, cached int) Outcome {
		return Outcome{Predicted: pred, HasPrediction: true, Cached: cached, Prompt: 500}
	}
	for _, tc := range []struct {
		name string
		in   []Outcome
		want Agreement
	}{
		{"exact hit", []Outcome{p(96, 96)}, Agreement{Requests: 1, Predicted: 1, HitAgrees: 1, WithinBlock: 1, Agrees: 1, Exact: 1}},
		{"both cold", []Outcome{p(0, 0)}, Agreement{Requests: 1, Predicted: 1, HitAgrees: 1, WithinBlock: 1, Agrees: 1, Exact: 1}},
		{"fully cached prompt of whole blocks: one block less served", []Outcome{p(128, 96)},
			Agreement{Requests: 1, Predicted: 1, HitAgrees: 1, WithinBlock: 1, Agrees: 1}},
		{"one block predicted, none served: within a block but not a hit", []Outcome{p(32, 0)},
			Agreement{Requests: 1, Predicted: 1, WithinBlock: 1}},
		{"over by two blocks", []Outcome{p(160, 96)}, Agreement{Requests: 1, Predicted: 1, HitAgrees: 1, Over: 1}},
		{"under: the engine held more", []Outcome{p(0, 256)}, Agreement{Requests: 1, Predicted: 1, Under: 1}},
		{"no prediction agrees with nothing", []Outcome{{Cached: 64, Prompt: 100}}, Agreement{Requests: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, Agree(tc.in, 32))
		})
	}
	a := Agree([]Outcome{p(64, 64), p(64, 64), p(64, 64), {Cached: 64}}, 32)
	require.InDelta(t, 0.75, a.Rate(a.Agrees), 1e-9, "the rate divides by every request, predicted or not")
	require.Zero(t, Agreement{}.Rate(0))

	pending := []Outcome{{Predicted: 64, Pending: 96, HasPrediction: true, Cached: 64}}
	require.Equal(t, 1, Agree(pending, 32).Exact)
	require.Equal(t, 1, Agree(WithPending(pending), 32).Over, "the policy's view counted three blocks more")
	require.Equal(t, 64, pending[0].Predicted, "WithPending copies")
}
