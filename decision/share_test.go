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

func TestShareCapConfig(t *testing.T) {
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

	measure := NewShareCap(shareConfig(0, time.Minute), nil)
	for i := range 100 {
		measure.Observe(float64(i)/100, i%2 == 0)
	}
	require.Zero(t, measure.Threshold(), "no cap: no floor")
	share, n := measure.Share()
	require.Equal(t, 100, n, "but the share is measured")
	require.InDelta(t, 0.5, share, 1e-9)
}

func TestShareCapFloorIsTheQuantile(t *testing.T) {
	clock := &fakeNow{t: time.Unix(1_700_000_000, 0)}
	b := NewShareCap(shareConfig(0.25, time.Minute), clock.now)

	// Fewer than ShareMinSamples: no floor.
	for i := range ShareMinSamples - 1 {
		b.Observe(float64(i)/100, false)
	}
	require.Zero(t, b.Threshold())

	// 100 scores 0.00, 0.01, ..., 0.99: the floor is the top edge of 0.74's bin, which the
	// 25 scores 0.75 ... 0.99 exceed: exactly the cap.
	b = NewShareCap(shareConfig(0.25, time.Minute), clock.now)
	for i := range 100 {
		b.Observe(float64(i)/100, i >= 75)
	}
	require.InDelta(t, 0.741, b.Threshold(), 1e-9)
	share, n := b.Share()
	require.Equal(t, 100, n)
	require.InDelta(t, 0.25, share, 1e-9)

	// A loose cap gives a low floor, below any load threshold: it changes no decision.
	loose := NewShareCap(shareConfig(0.9, time.Minute), clock.now)
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

func TestShareUnitConfig(t *testing.T) {
	for _, unit := range []string{ShareUnitRequests, ShareUnitTokens} {
		cfg := shareConfig(0.3, time.Minute)
		cfg.ShareUnit = unit
		require.NoError(t, cfg.Validate())
		require.Equal(t, unit, NewShareCap(cfg, nil).Unit())
	}
	for _, unit := range []string{"", "token", "Tokens"} {
		cfg := shareConfig(0, time.Minute) // validated even with no cap
		cfg.ShareUnit = unit
		require.ErrorContains(t, cfg.Validate(), fmt.Sprintf(`decision.share_unit: must be "requests" or "tokens", got %q`, unit))
	}
	require.Equal(t, ShareUnitRequests, DefaultConfig().ShareUnit)
}

// tokenBudget returns a tokens-unit budget with cap maxShare over a minute.
func tokenBudget(maxShare float64, now func() time.Time) *ShareCap {
	cfg := shareConfig(maxShare, time.Minute)
	cfg.ShareUnit = ShareUnitTokens
	return NewShareCap(cfg, now)
}

// TestShareCapTokenQuantile: hard requests that cost 3× the tokens of easy ones are 25% of
// the requests but 50% of the tokens. A 30% cap on tokens lets 15 of them through (4500 of
// 15000 tokens); the same cap on requests would let 30 through.
func TestShareCapTokenQuantile(t *testing.T) {
	clock := &fakeNow{t: time.Unix(1_700_000_000, 0)}
	// Scores in the middle of their bins: 75 easy at 0.0005 ... 0.7405 with 100 tokens, 25
	// hard at 0.7505 ... 0.9905 with 300.
	score := func(i int) float64 { return float64(i)/100 + 0.0005 }
	tokens := func(i int) int {
		if i >= 75 {
			return 300
		}
		return 100
	}
	tok := tokenBudget(0.3, clock.now)
	req := NewShareCap(shareConfig(0.3, time.Minute), clock.now)
	for i := range 100 {
		tok.ObserveTokens(score(i), i >= 75, tokens(i))
		req.ObserveTokens(score(i), i >= 75, tokens(i)) // the requests unit ignores the tokens
	}
	share, n := tok.Share()
	require.Equal(t, 100, n)
	require.InDelta(t, 0.5, share, 1e-9, "hard requests are half the tokens")
	share, _ = req.Share()
	require.InDelta(t, 0.25, share, 1e-9, "and a quarter of the requests")

	floor := tok.Threshold()
	require.InDelta(t, 0.841, floor, 1e-9, "the top edge of 0.8405's bin: the 15 scores 0.8505 ... 0.9905 are let through")
	require.InDelta(t, 0.691, req.Threshold(), 1e-9, "on requests, the 30 scores from 0.7005")

	// Decided under the token floor, the next window's slow requests carry 30% of its tokens.
	clock.advance(2 * time.Minute)
	for i := range 100 {
		tok.ObserveTokens(score(i), score(i) > floor, tokens(i))
	}
	share, _ = tok.Share()
	require.InDelta(t, 0.3, share, 1e-9)
}

// TestShareCapUnmetered: a request whose tokens never arrive weighs the window's mean
// tokens per metered request, so it neither vanishes from the share nor swamps it.
func TestShareCapUnmetered(t *testing.T) {
	clock := &fakeNow{t: time.Unix(1_700_000_000, 0)}
	b := tokenBudget(0.3, clock.now)

	// No metered request: every request weighs the same, the share is the request share.
	for i := range 40 {
		b.Observe(0.9, i < 10)
	}
	share, n := b.Share()
	require.Equal(t, 40, n)
	require.InDelta(t, 0.25, share, 1e-9)

	// 60 metered easy requests of 100 tokens: the mean is 100, so the 40 unmetered weigh
	// 4000 tokens, 1000 of them slow, out of 10000.
	for range 60 {
		b.ObserveTokens(0.1, false, 100)
	}
	share, n = b.Share()
	require.Equal(t, 100, n)
	require.InDelta(t, 0.1, share, 1e-9)
	// Negative tokens are unknown too.
	b.ObserveTokens(0.9, true, -1)
	share, _ = b.Share()
	require.InDelta(t, 1100.0/10100, share, 1e-9)

	// The floor weighs them the same way: 41 unmetered at 0.9 are 4100 of 10100 tokens, above
	// a 30% cap, so the floor sits at their bin's top edge.
	require.InDelta(t, 0.901, b.Threshold(), 1e-9)

	// Once the metered ones are longer, the same unmetered requests weigh more.
	clock.advance(time.Minute + time.Second) // all of it leaves
	for range 60 {
		b.ObserveTokens(0.1, false, 1000)
	}
	for range 40 {
		b.Observe(0.9, true)
	}
	share, _ = b.Share()
	require.InDelta(t, 0.4, share, 1e-9)
}

func TestShareCapWindowSlides(t *testing.T) {
	clock := &fakeNow{t: time.Unix(1_700_000_000, 0)}
	b := NewShareCap(shareConfig(0.1, time.Minute), clock.now)
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
	g, err := NewPolicy(Config{Policy: PolicyGreyZone, Base: 0.5, GreyLow: 0.45, GreyHigh: 0.55, HighQueue: 10, LowQueue: 3, MaxSlowConcurrency: 1, ShareWindow: time.Minute, ShareUnit: ShareUnitRequests})
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
		{"above both", q, 0.9, State{SlowMax: 10, ShareFloor: 0.8}, true, ReasonSlowGranted, 0.8},
		{"between: the budget binds", q, 0.7, State{SlowMax: 10, ShareFloor: 0.8}, false, ReasonShareShedding, 0.8},
		{"at the floor", q, 0.8, State{SlowMax: 10, ShareFloor: 0.8}, false, ReasonShareShedding, 0.8},
		{"below both: the load binds", q, 0.7, State{SlowActive: 10, SlowMax: 10, ShareFloor: 0.8}, false, ReasonLoadShedding, 0.95},
		{"floor below the load threshold", q, 0.6, State{SlowActive: 5, SlowMax: 10, ShareFloor: 0.55}, false, ReasonLoadShedding, 0.6125},
		{"model fast", q, 0.3, State{SlowMax: 10, ShareFloor: 0.8}, false, ReasonFastModel, 0.8},
		{"no floor", q, 0.51, State{SlowMax: 10}, true, ReasonSlowGranted, 0.5},
		{"grey zone: label slow under the floor", g, 0.7, State{SlowMax: 10, ShareFloor: 0.8}, false, ReasonShareShedding, 0.8},
		{"grey zone: short queue under the floor", g, 0.5, State{SlowMax: 10, ShareFloor: 0.8}, false, ReasonShareShedding, 0.8},
		{"grey zone: above the floor", g, 0.85, State{SlowMax: 10, ShareFloor: 0.8}, true, ReasonSlowGranted, 0.8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := tt.p.Decide(Score{PSlow: tt.pSlow, Cutoff: 0.5}, tt.st)
			require.Equal(t, tt.slow, d.Slow)
			require.Equal(t, tt.reason, d.Reason)
			require.InDelta(t, tt.thr, d.Threshold, 1e-12)
			require.Equal(t, tt.st.ShareFloor, d.ShareFloor)
			require.Equal(t, math.Max(d.LoadThreshold, d.ShareFloor), d.Threshold, "the stricter part is the threshold")
		})
	}
}

// stepResult is the slow share over time of a simulated step in the traffic mix.
type stepResult struct {
	bucket  time.Duration
	shares  []float64 // slow share of each bucket's requests (tokens unit: of its tokens)
	step    int       // the first bucket after the step
	settled int       // the first bucket after the step from which every share is within tol of the cap
}

// stepSpec is a simulated step in the traffic mix: rate requests per second for 2·half, a
// hard share of them before the step and another after. Hard requests score uniformly in
// [0.55, 1), easy ones in [0, 0.45). In the tokens unit a request costs tokens drawn
// uniformly within ±50% of easyTokens or hardTokens, and is observed with them.
type stepSpec struct {
	maxShare              float64
	window                time.Duration
	rate                  int
	half                  time.Duration
	hardBefore, hardAfter float64
	tol                   float64
	unit                  string
	easyTokens            int
	hardTokens            int
}

// requestStep is the request-unit step: 20% → 60% hard requests under a 30% cap, 2m window.
var requestStep = stepSpec{maxShare: 0.3, window: 2 * time.Minute, rate: 200, half: 10 * time.Minute,
	hardBefore: 0.2, hardAfter: 0.6, tol: 0.05, unit: ShareUnitRequests}

// tokenStep is the token-unit step: hard requests cost 3× the tokens of easy ones, so 10%
// hard requests are 25% of the tokens and 60% are 82%; cap 30% of the tokens, 2m window.
var tokenStep = stepSpec{maxShare: 0.3, window: 2 * time.Minute, rate: 200, half: 10 * time.Minute,
	hardBefore: 0.1, hardAfter: 0.6, tol: 0.05, unit: ShareUnitTokens, easyTokens: 200, hardTokens: 600}

// simulateStep runs sp: the quadratic policy decides at zero load under the budget.
func simulateStep(sp stepSpec) stepResult {
	clock := &fakeNow{t: time.Unix(1_700_000_000, 0)}
	cfg := shareConfig(sp.maxShare, sp.window)
	cfg.ShareUnit = sp.unit
	b := NewShareCap(cfg, clock.now)
	p, _ := NewPolicy(cfg)
	rng := rand.New(rand.NewPCG(1, 2))
	res := stepResult{bucket: 10 * time.Second}
	gap := time.Second / time.Duration(sp.rate)
	var slow, n float64
	end := clock.t.Add(2 * sp.half)
	stepAt := clock.t.Add(sp.half)
	next := clock.t.Add(res.bucket)
	for clock.t.Before(end) {
		hard := sp.hardBefore
		if !clock.t.Before(stepAt) {
			hard = sp.hardAfter
		}
		ps := rng.Float64() * 0.45
		mean := sp.easyTokens
		if rng.Float64() < hard {
			ps = 0.55 + rng.Float64()*0.45
			mean = sp.hardTokens
		}
		d := p.Decide(Score{PSlow: ps, Cutoff: 0.5}, State{SlowMax: 50, ShareFloor: b.Threshold()})
		w := 1.0
		if sp.unit == ShareUnitTokens {
			tokens := mean/2 + rng.IntN(mean)
			b.ObserveTokens(ps, d.Slow, tokens)
			w = float64(tokens)
		} else {
			b.Observe(ps, d.Slow)
		}
		if d.Slow {
			slow += w
		}
		n += w
		clock.advance(gap)
		if !clock.t.Before(next) {
			res.shares = append(res.shares, slow/n)
			slow, n = 0, 0
			next = next.Add(res.bucket)
			if res.step == 0 && !clock.t.Before(stepAt) {
				res.step = len(res.shares)
			}
		}
	}
	res.settled = len(res.shares)
	for i := len(res.shares) - 1; i >= res.step; i-- {
		if math.Abs(res.shares[i]-sp.maxShare) > sp.tol {
			break
		}
		res.settled = i
	}
	return res
}

// TestShareCapConvergesAfterAStep: traffic whose own slow share is under a 30% cap is left
// alone; when hard requests jump to 60%, the share comes down to the cap within one window
// and stays there, without swinging below it. In requests (20% hard before the step) and in
// tokens (10% hard requests, 3× the tokens: 25% of the tokens before the step).
func TestShareCapConvergesAfterAStep(t *testing.T) {
	for _, tc := range []struct {
		sp     stepSpec
		before float64 // the share before the step, under the cap
	}{
		{requestStep, 0.2},
		{tokenStep, 0.25},
	} {
		t.Run(tc.sp.unit, func(t *testing.T) {
			r := simulateStep(tc.sp)
			before := r.shares[r.step-6 : r.step] // the last minute before the step
			for _, s := range before {
				require.InDelta(t, tc.before, s, 0.06, "under the cap the budget changes nothing: %v", before)
			}
			settle := time.Duration(r.settled-r.step) * r.bucket
			require.LessOrEqual(t, settle, tc.sp.window+r.bucket, "settled after %s; shares %v", settle, r.shares[r.step:])
			after := r.shares[r.settled:]
			require.NotEmpty(t, after)
			for i := 1; i < r.settled-r.step; i++ {
				require.LessOrEqual(t, r.shares[r.step+i], r.shares[r.step+i-1]+0.05, "the share comes down monotonically (within noise): %v", r.shares[r.step:r.settled])
			}
		})
	}
}

// BenchmarkShareCapStep shows the slow share over time around a step in the traffic mix
// and reports the settling time: requests (20% → 60% hard requests, 30% cap, 2m window) and
// tokens (10% → 60% hard requests costing 3× the tokens, 30% cap on tokens, 2m window). Run
// with -v for the series. The per-request cost of the budget is BenchmarkShareCap's.
func BenchmarkShareCapStep(b *testing.B) {
	for _, sp := range []stepSpec{requestStep, tokenStep} {
		b.Run(sp.unit, func(b *testing.B) {
			var r stepResult
			for b.Loop() {
				r = simulateStep(sp)
			}
			var sb strings.Builder
			for i := r.step - 3; i < len(r.shares); i += 3 {
				fmt.Fprintf(&sb, "t=%+5.0fs share=%.3f\n", (time.Duration(i-r.step) * r.bucket).Seconds(), r.shares[i])
			}
			b.Logf("slow share (%s) per %s around the step (t=0), cap %.2f:\n%s", sp.unit, r.bucket, sp.maxShare, sb.String())
			b.ReportMetric((time.Duration(r.settled-r.step) * r.bucket).Seconds(), "settle_s")
			b.ReportMetric(r.shares[r.step], "share_at_step")
			var sum float64
			for _, s := range r.shares[r.settled:] {
				sum += s
			}
			b.ReportMetric(sum/float64(len(r.shares)-r.settled), "share_settled")
		})
	}
}

func BenchmarkShareCap(b *testing.B) {
	b.ReportAllocs()
	bud := NewShareCap(shareConfig(0.3, 5*time.Minute), nil)
	for i := 0; b.Loop(); i++ {
		ps := float64(i&1023) / 1024
		_ = bud.Threshold()
		bud.Observe(ps, ps > 0.7)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/request")
}
