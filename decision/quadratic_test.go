package decision

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// stateAt returns a State with the given load on a 1000-slot semaphore, so loads like 0.2 are
// exact ratios of integers.
func stateAt(load float64) State {
	return State{SlowActive: int(math.Round(load * 1000)), SlowMax: 1000}
}

func defaultQuadratic(t *testing.T) *Quadratic {
	t.Helper()
	p, err := NewPolicy(DefaultConfig())
	require.NoError(t, err)
	q, ok := p.(*Quadratic)
	require.True(t, ok, "default policy is %T, want *Quadratic", p)
	return q
}

// TestQuadraticCurve pins the curve of the original Triage design (docs/sources.md):
// 0.5 + 0.45·load².
func TestQuadraticCurve(t *testing.T) {
	q := defaultQuadratic(t)
	tests := []struct {
		load, threshold float64
	}{
		{0, 0.50},
		{0.2, 0.518},
		{0.5, 0.6125},
		{0.8, 0.788},
		{1.0, 0.95},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("load=%v", tt.load), func(t *testing.T) {
			require.InDelta(t, tt.threshold, q.Threshold(tt.load), 1e-9)
			d := q.Decide(Score{PSlow: 0.5, Cutoff: 0.5}, stateAt(tt.load))
			require.InDelta(t, tt.threshold, d.Threshold, 1e-9)
			require.InDelta(t, tt.load, d.Load, 1e-12)
		})
	}
}

func TestQuadraticDecide(t *testing.T) {
	q := defaultQuadratic(t)
	tests := []struct {
		load   float64
		pSlow  float64
		slow   bool
		reason Reason
	}{
		// Idle: the threshold is the model's own cutoff.
		{0, 0.10, false, ReasonFastModel},
		{0, 0.50, false, ReasonFastModel}, // strictly greater is required
		{0, 0.51, true, ReasonSlowGranted},
		{0, 0.99, true, ReasonSlowGranted},
		// 20%: threshold 0.518.
		{0.2, 0.51, false, ReasonLoadShedding},
		{0.2, 0.52, true, ReasonSlowGranted},
		{0.2, 0.30, false, ReasonFastModel},
		// 50%: threshold 0.6125.
		{0.5, 0.60, false, ReasonLoadShedding},
		{0.5, 0.62, true, ReasonSlowGranted},
		// 80%: threshold 0.788.
		{0.8, 0.70, false, ReasonLoadShedding},
		{0.8, 0.80, true, ReasonSlowGranted},
		{0.8, 0.45, false, ReasonFastModel},
		// Full: only P(slow) > 0.95 goes slow.
		{1.0, 0.95, false, ReasonLoadShedding},
		{1.0, 0.96, true, ReasonSlowGranted},
		{1.0, 0.20, false, ReasonFastModel},
		// NaN never goes slow.
		{0, math.NaN(), false, ReasonFastModel},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("load=%v/p=%v", tt.load, tt.pSlow), func(t *testing.T) {
			d := q.Decide(Score{PSlow: tt.pSlow, Cutoff: 0.5}, stateAt(tt.load))
			require.Equal(t, tt.slow, d.Slow)
			require.Equal(t, tt.reason, d.Reason)
		})
	}
}

func TestQuadraticBaseBelowCutoff(t *testing.T) {
	q := &Quadratic{Base: 0.4, Alpha: 0.5}
	d := q.Decide(Score{PSlow: 0.45, Cutoff: 0.5}, State{SlowMax: 10})
	require.True(t, d.Slow, "P above a base below 0.5 goes slow")
	require.Equal(t, ReasonSlowGranted, d.Reason)
}

func TestStateLoad(t *testing.T) {
	tests := []struct {
		name string
		st   State
		want float64
	}{
		{"idle", State{SlowActive: 0, SlowMax: 50}, 0},
		{"half", State{SlowActive: 25, SlowMax: 50}, 0.5},
		{"full", State{SlowActive: 50, SlowMax: 50}, 1},
		{"over", State{SlowActive: 70, SlowMax: 50}, 1},
		{"negative", State{SlowActive: -1, SlowMax: 50}, 0},
		{"no capacity", State{SlowActive: 0, SlowMax: 0}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, tt.st.Load())
		})
	}
}

func TestDecideAllocationFree(t *testing.T) {
	cfg := DefaultConfig()
	q, err := NewPolicy(cfg)
	require.NoError(t, err)
	cfg.Policy = PolicyGreyZone
	g, err := NewPolicy(cfg)
	require.NoError(t, err)
	st := State{SlowActive: 17, SlowMax: 50, QueueLen: 5}
	for _, p := range []Policy{q, g} {
		allocs := testing.AllocsPerRun(1000, func() { _ = p.Decide(Score{PSlow: 0.53, Cutoff: 0.5}, st) })
		require.Zero(t, allocs, "%T.Decide allocates", p)
	}
}

var sinkDecision Decision

func BenchmarkDecide(b *testing.B) {
	cfg := DefaultConfig()
	for _, name := range []string{PolicyQuadratic, PolicyGreyZone} {
		cfg.Policy = name
		p, err := NewPolicy(cfg)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name, func(b *testing.B) {
			st := State{SlowActive: 17, SlowMax: 50, QueueLen: 5}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				sinkDecision = p.Decide(Score{PSlow: float64(i&1023) / 1024, Cutoff: 0.5}, st)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/decision")
		})
	}
}

// The model's cutoff comes with the score: a model whose manifest says 0.6 calls 0.55 fast, so
// a fast decision for it is fast_model, not load_shedding, and 0.65 shed under load is
// load_shedding.
func TestReasonsFollowTheScoresCutoff(t *testing.T) {
	q := &Quadratic{Base: 0.6, Alpha: 0.35}
	d := q.Decide(Score{PSlow: 0.55, Cutoff: 0.6}, stateAt(0))
	require.Equal(t, ReasonFastModel, d.Reason)
	d = q.Decide(Score{PSlow: 0.65, Cutoff: 0.6}, stateAt(1))
	require.Equal(t, ReasonLoadShedding, d.Reason)
	d = q.Decide(Score{PSlow: 0.65, Cutoff: 0.6}, stateAt(0))
	require.Equal(t, ReasonSlowGranted, d.Reason)

	g := &GreyZone{Low: 0.55, High: 0.65, HighQueue: 10, LowQueue: 3}
	d = g.Decide(Score{PSlow: 0.7, Cutoff: 0.6}, State{SlowMax: 1, QueueLen: 5})
	require.Equal(t, ReasonSlowGranted, d.Reason)
	require.Equal(t, 0.6, d.Threshold)
	d = g.Decide(Score{PSlow: 0.62, Cutoff: 0.6}, State{SlowMax: 1, QueueLen: 5})
	require.Equal(t, ReasonSlowGranted, d.Reason, "inside the zone with a middling queue the label decides")
	d = g.Decide(Score{PSlow: 0.58, Cutoff: 0.6}, State{SlowMax: 1, QueueLen: 5})
	require.Equal(t, ReasonFastModel, d.Reason)
}
