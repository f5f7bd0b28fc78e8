package decision

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeNow is a clock tests move by hand.
type fakeNow struct{ t time.Time }

func (c *fakeNow) now() time.Time          { return c.t }
func (c *fakeNow) advance(d time.Duration) { c.t = c.t.Add(d) }

func shareConfig(maxShare float64, window time.Duration) Config {
	cfg := DefaultConfig()
	cfg.MaxSlowShare, cfg.ShareWindow = maxShare, window
	return cfg
}

func TestShareBudgetConfig(t *testing.T) {
	for _, tc := range []struct {
		maxShare float64
		window   time.Duration
		want     string
	}{
		{0, 5 * time.Minute, ""},
		{0.3, 10 * time.Second, ""},
		{0.999, 24 * time.Hour, ""},
		{1, 5 * time.Minute, "decision.max_slow_share: must be in [0, 1) (0 sets no cap), got 1"},
		{-0.1, 5 * time.Minute, "decision.max_slow_share"},
		{math.NaN(), 5 * time.Minute, "decision.max_slow_share"},
		{0.3, 9 * time.Second, "decision.share_window: must be in [10s, 24h], got 9s"},
		{0, 0, "decision.share_window"}, // validated even with no cap, like every unused field
	} {
		err := shareConfig(tc.maxShare, tc.window).Validate()
		if tc.want == "" {
			require.NoError(t, err)
			continue
		}
		require.ErrorContains(t, err, tc.want)
	}

	measure := NewShareBudget(shareConfig(0, time.Minute), nil)
	for i := range 100 {
		measure.Observe(float64(i)/100, i%2 == 0)
	}
	require.Zero(t, measure.Threshold(), "no cap: no floor")
	share, n := measure.Share()
	require.Equal(t, 100, n, "but the share is measured")
	require.InDelta(t, 0.5, share, 1e-9)
}

func TestShareBudgetFloorIsTheQuantile(t *testing.T) {
	clock := &fakeNow{t: time.Unix(1_700_000_000, 0)}
	b := NewShareBudget(shareConfig(0.25, time.Minute), clock.now)

	// Fewer than ShareMinSamples: no floor.
	for i := range ShareMinSamples - 1 {
		b.Observe(float64(i)/100, false)
	}
	require.Zero(t, b.Threshold())

	// 100 scores 0.00, 0.01, ..., 0.99: the floor is the top edge of 0.74's bin, which the
	// 25 scores 0.75 ... 0.99 exceed: exactly the cap.
	b = NewShareBudget(shareConfig(0.25, time.Minute), clock.now)
	for i := range 100 {
		b.Observe(float64(i)/100, i >= 75)
	}
	require.InDelta(t, 0.741, b.Threshold(), 1e-9)
	share, n := b.Share()
	require.Equal(t, 100, n)
	require.InDelta(t, 0.25, share, 1e-9)

	// A loose cap gives a low floor, below any load threshold: it changes no decision.
	loose := NewShareBudget(shareConfig(0.9, time.Minute), clock.now)
	for i := range 100 {
		loose.Observe(float64(i)/1000, false)
	}
	require.InDelta(t, 0.01, loose.Threshold(), 1e-9)

	// NaN is not recorded; scores outside [0, 1] land in the end bins.
	b.Observe(math.NaN(), false)
	b.Observe(-1, false)
	b.Observe(2, true)
	_, n = b.Share()
	require.Equal(t, 102, n)
}

func TestShareBudgetWindowSlides(t *testing.T) {
	clock := &fakeNow{t: time.Unix(1_700_000_000, 0)}
	b := NewShareBudget(shareConfig(0.1, time.Minute), clock.now)
	for range 100 {
		b.Observe(0.9, true)
	}
	require.InDelta(t, 0.901, b.Threshold(), 1e-9, "all scores equal: the floor passes none of them")

	clock.advance(30 * time.Second)
	for range 100 {
		b.Observe(0.2, false)
	}
	share, n := b.Share()
	require.Equal(t, 200, n)
	require.InDelta(t, 0.5, share, 1e-9)

	clock.advance(31 * time.Second) // the first hundred have left the window
	share, n = b.Share()
	require.Equal(t, 100, n)
	require.Zero(t, share)
	require.InDelta(t, 0.201, b.Threshold(), 1e-9)

	clock.advance(time.Hour) // everything has left
	require.Zero(t, b.Threshold())
	_, n = b.Share()
	require.Zero(t, n)
}

func TestBudgetFloorInDecisions(t *testing.T) {
	q := defaultQuadratic(t)
	g, err := NewPolicy(Config{Policy: PolicyGreyZone, Base: 0.5, GreyLow: 0.45, GreyHigh: 0.55, HighQueue: 10, LowQueue: 3, MaxSlowConcurrency: 1, ShareWindow: time.Minute})
	require.NoError(t, err)
	tests := []struct {
		name   string
		p      Policy
		pSlow  float64
		st     State
		slow   bool
		reason Reason
		thr    float64
	}{
		{"above both", q, 0.9, State{SlowMax: 10, BudgetThreshold: 0.8}, true, ReasonSlowGranted, 0.8},
		{"between: the budget binds", q, 0.7, State{SlowMax: 10, BudgetThreshold: 0.8}, false, ReasonBudgetShedding, 0.8},
		{"at the floor", q, 0.8, State{SlowMax: 10, BudgetThreshold: 0.8}, false, ReasonBudgetShedding, 0.8},
		{"below both: the load binds", q, 0.7, State{SlowActive: 10, SlowMax: 10, BudgetThreshold: 0.8}, false, ReasonLoadShedding, 0.95},
		{"floor below the load threshold", q, 0.6, State{SlowActive: 5, SlowMax: 10, BudgetThreshold: 0.55}, false, ReasonLoadShedding, 0.6125},
		{"model fast", q, 0.3, State{SlowMax: 10, BudgetThreshold: 0.8}, false, ReasonFastModel, 0.8},
		{"no floor", q, 0.51, State{SlowMax: 10}, true, ReasonSlowGranted, 0.5},
		{"grey zone: label slow under the floor", g, 0.7, State{SlowMax: 10, BudgetThreshold: 0.8}, false, ReasonBudgetShedding, 0.8},
		{"grey zone: short queue under the floor", g, 0.5, State{SlowMax: 10, BudgetThreshold: 0.8}, false, ReasonBudgetShedding, 0.8},
		{"grey zone: above the floor", g, 0.85, State{SlowMax: 10, BudgetThreshold: 0.8}, true, ReasonSlowGranted, 0.8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := tt.p.Decide(Score{PSlow: tt.pSlow, Cutoff: 0.5}, tt.st)
			require.Equal(t, tt.slow, d.Slow)
			require.Equal(t, tt.reason, d.Reason)
			require.InDelta(t, tt.thr, d.Threshold, 1e-12)
			require.Equal(t, tt.st.BudgetThreshold, d.BudgetThreshold)
			require.Equal(t, math.Max(d.LoadThreshold, d.BudgetThreshold), d.Threshold, "the stricter part is the threshold")
		})
	}
}

// stepResult is the slow share over time of a simulated step in the traffic mix.
type stepResult struct {
	bucket  time.Duration
	shares  []float64 // slow share of each bucket's requests
	step    int       // the first bucket after the step
	settled int       // the first bucket after the step from which every share is within tol of the cap
}

// simulateStep sends rate requests per second for 2·half, a hard share of them before the step
// and another after; hard requests score uniformly in [0.55, 1), easy ones in [0, 0.45). The
// quadratic policy decides at zero load under a budget of maxShare over window.
func simulateStep(maxShare float64, window time.Duration, rate int, half time.Duration, hardBefore, hardAfter, tol float64) stepResult {
	clock := &fakeNow{t: time.Unix(1_700_000_000, 0)}
	cfg := shareConfig(maxShare, window)
	b := NewShareBudget(cfg, clock.now)
	p, _ := NewPolicy(cfg)
	rng := rand.New(rand.NewPCG(1, 2))
	res := stepResult{bucket: 10 * time.Second}
	gap := time.Second / time.Duration(rate)
	var slow, n int
	end := clock.t.Add(2 * half)
	stepAt := clock.t.Add(half)
	next := clock.t.Add(res.bucket)
	for clock.t.Before(end) {
		hard := hardBefore
		if !clock.t.Before(stepAt) {
			hard = hardAfter
		}
		ps := rng.Float64() * 0.45
		if rng.Float64() < hard {
			ps = 0.55 + rng.Float64()*0.45
		}
		d := p.Decide(Score{PSlow: ps, Cutoff: 0.5}, State{SlowMax: 50, BudgetThreshold: b.Threshold()})
		b.Observe(ps, d.Slow)
		if d.Slow {
			slow++
		}
		n++
		clock.advance(gap)
		if !clock.t.Before(next) {
			res.shares = append(res.shares, float64(slow)/float64(n))
			slow, n = 0, 0
			next = next.Add(res.bucket)
			if res.step == 0 && !clock.t.Before(stepAt) {
				res.step = len(res.shares)
			}
		}
	}
	res.settled = len(res.shares)
	for i := len(res.shares) - 1; i >= res.step; i-- {
		if math.Abs(res.shares[i]-maxShare) > tol {
			break
		}
		res.settled = i
	}
	return res
}

// TestShareBudgetConvergesAfterAStep: traffic whose own slow share (20%) is under a 30% cap
// is left alone; when it jumps to 60% hard requests, the share comes down to the cap within
// one window and stays there, without swinging below it.
func TestShareBudgetConvergesAfterAStep(t *testing.T) {
	window := 2 * time.Minute
	r := simulateStep(0.3, window, 200, 10*time.Minute, 0.2, 0.6, 0.05)
	before := r.shares[r.step-6 : r.step] // the last minute before the step
	for _, s := range before {
		require.InDelta(t, 0.2, s, 0.06, "under the cap the budget changes nothing: %v", before)
	}
	settle := time.Duration(r.settled-r.step) * r.bucket
	require.LessOrEqual(t, settle, window+r.bucket, "settled after %s; shares %v", settle, r.shares[r.step:])
	after := r.shares[r.settled:]
	require.NotEmpty(t, after)
	for i := 1; i < r.settled-r.step; i++ {
		require.LessOrEqual(t, r.shares[r.step+i], r.shares[r.step+i-1]+0.05, "the share comes down monotonically (within noise): %v", r.shares[r.step:r.settled])
	}
}

// BenchmarkShareBudgetStep shows the slow share over time around a step in the traffic mix
// (20% → 60% hard requests, 30% cap, 2m window; run with -v for the series) and reports the
// settling time. The per-request cost of the budget is BenchmarkShareBudget's.
func BenchmarkShareBudgetStep(b *testing.B) {
	var r stepResult
	for b.Loop() {
		r = simulateStep(0.3, 2*time.Minute, 200, 10*time.Minute, 0.2, 0.6, 0.05)
	}
	var sb strings.Builder
	for i := r.step - 3; i < len(r.shares); i += 3 {
		fmt.Fprintf(&sb, "t=%+5.0fs share=%.3f\n", (time.Duration(i-r.step) * r.bucket).Seconds(), r.shares[i])
	}
	b.Logf("slow share per %s around the step (t=0), cap 0.30:\n%s", r.bucket, sb.String())
	b.ReportMetric((time.Duration(r.settled-r.step) * r.bucket).Seconds(), "settle_s")
	b.ReportMetric(r.shares[r.step], "share_at_step")
	var sum float64
	for _, s := range r.shares[r.settled:] {
		sum += s
	}
	b.ReportMetric(sum/float64(len(r.shares)-r.settled), "share_settled")
}

func BenchmarkShareBudget(b *testing.B) {
	b.ReportAllocs()
	bud := NewShareBudget(shareConfig(0.3, 5*time.Minute), nil)
	for i := 0; b.Loop(); i++ {
		ps := float64(i&1023) / 1024
		_ = bud.Threshold()
		bud.Observe(ps, ps > 0.7)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/request")
}
