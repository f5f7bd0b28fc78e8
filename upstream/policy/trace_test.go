package policy

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestTracerRecord(t *testing.T) {
	cs := cands(0, 1, 2, 3, 4)
	tests := []struct {
		name          string
		scores        []float64
		chosen        int
		lowerIsBetter bool
		top           []string
		regret        float64
	}{
		{"higher is better, best chosen", []float64{0.1, 0.9, 0.5, 0.7, 0.2}, 1, false, []string{"r1", "r3", "r2"}, 0},
		{"higher is better, worse chosen", []float64{0.1, 0.9, 0.5, 0.7, 0.2}, 2, false, []string{"r1", "r3", "r2"}, 0.4},
		{"lower is better", []float64{30, 10, 20, 40, 50}, 3, true, []string{"r1", "r2", "r0"}, 30},
		{"ties keep candidate order", []float64{1, 1, 1, 1, 1}, 4, false, []string{"r0", "r1", "r2"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := NewTracer(3, 4, nil)
			tr.Record(cs, tt.scores, tt.chosen, tt.lowerIsBetter, "n")
			recs := tr.Recent(10)
			require.Len(t, recs, 1)
			r := recs[0]
			var ids []string
			for _, c := range r.Top {
				ids = append(ids, c.ID)
			}
			require.Equal(t, tt.top, ids)
			require.InDelta(t, tt.regret, r.Regret, 1e-12)
			require.Equal(t, cs[tt.chosen].ID, r.Chosen.ID)
			require.Equal(t, tt.scores[tt.chosen], r.Chosen.Score)
			require.Equal(t, cs[tt.chosen].InFlight, r.Chosen.InFlight)
			require.Equal(t, "n", r.Note)
			require.Equal(t, uint64(1), r.Seq)
		})
	}
}

func TestTracerRing(t *testing.T) {
	clock := newFakeClock()
	tr := NewTracer(2, 3, clock.Now)
	require.Empty(t, tr.Recent(5))
	cs := cands(0, 0)
	for i := range 5 {
		tr.Record(cs, []float64{float64(i), 0}, 0, false, fmt.Sprint(i))
		clock.Advance(time.Second)
	}
	recs := tr.Recent(10)
	require.Len(t, recs, 3, "capacity bounds what is kept")
	for i, r := range recs {
		require.Equal(t, uint64(i+3), r.Seq, "oldest first")
		require.Equal(t, fmt.Sprint(i+2), r.Note)
	}
	require.Len(t, tr.Recent(2), 2)
	require.Equal(t, uint64(5), tr.Recent(1)[0].Seq)

	// Recent returns copies: later records do not change them.
	kept := tr.Recent(1)[0]
	tr.Record(cs, []float64{-1, -2}, 1, false, "later")
	require.Equal(t, 4.0, kept.Top[0].Score)
}

func TestTracerNilAndBadInput(t *testing.T) {
	var tr *Tracer
	tr.Record(cands(0), []float64{1}, 0, false, "") // no panic
	require.Nil(t, tr.Recent(3))

	tr = NewTracer(2, 2, nil)
	tr.Record(cands(0, 0), []float64{1}, 0, false, "") // scores too short
	tr.Record(cands(0, 0), []float64{1, 2}, 2, false, "")
	require.Empty(t, tr.Recent(3))
}

func TestTracerAllocs(t *testing.T) {
	tr := NewTracer(3, 8, nil)
	cs := cands(1, 2, 3, 4, 5, 6, 7, 8)
	scores := []float64{8, 7, 6, 5, 4, 3, 2, 1}
	allocs := testing.AllocsPerRun(100, func() { tr.Record(cs, scores, 3, true, "") })
	require.Zero(t, allocs)
}

func TestTraceConfigValidate(t *testing.T) {
	require.NoError(t, DefaultTraceConfig().ValidateAt("trace"))
	err := TraceConfig{TopK: 100, Capacity: -1}.ValidateAt("trace")
	require.ErrorContains(t, err, "trace.top_k: must be in [1, 64], got 100")
	require.ErrorContains(t, err, "trace.capacity")
}

func TestTracerCapacity(t *testing.T) {
	var none *Tracer
	require.Zero(t, none.Capacity())
	tr := NewTracer(2, 3, nil)
	require.Equal(t, 3, tr.Capacity())
	for range 5 {
		tr.Record(cands(0), []float64{1}, 0, false, "")
	}
	require.Len(t, tr.Recent(100), tr.Capacity(), "Recent never returns more than Capacity")
}
