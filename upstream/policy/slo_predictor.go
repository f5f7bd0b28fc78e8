package policy

import (
	"math"
	"sync"
	"time"
)

// ttftPredictor predicts each replica's time to first token from the load
// it would meet, fitted online from the gateway's own measurements: per
// replica, a least-squares line TTFT ≈ a + b·inFlight over the observed
// (in-flight at pick, TTFT) pairs, each weighted e^(−age/window), so old
// samples fade and a replica whose behaviour changed (another model, a
// restart, a noisy neighbour) is relearned within a few windows.
//
// The prompt's length is not a feature. The gateway's token count is an
// estimate (len/4), and a third coefficient needs prompts of varied length
// at every load before it stops trading off against the other two; under
// a steady mix of prompts the line's intercept absorbs the mean prefill.
//
// Memory: five floats and a time per replica ever observed. Replica IDs come
// from the pool's config, never from clients, so the table is bounded by
// the pool's size (plus replicas removed by a reload, which stop growing it).
//
// Concurrency: one mutex guards the table, held for one observation or one
// decision's predictions.
type ttftPredictor struct {
	tau        float64 // window in seconds
	minSamples float64
	now        func() time.Time

	mu   sync.Mutex
	fits map[string]*ttftFit
}

// ttftFit is one replica's decayed least-squares sums, as of at.
type ttftFit struct {
	w, sx, sy, sxx, sxy float64
	at                  time.Time
}

func newTTFTPredictor(window time.Duration, minSamples int, now func() time.Time) *ttftPredictor {
	return &ttftPredictor{tau: window.Seconds(), minSamples: float64(minSamples), now: now, fits: make(map[string]*ttftFit)}
}

// observe adds one sample: the replica had inFlight requests when the
// request was picked, and its first token came after ttft.
func (p *ttftPredictor) observe(replicaID string, inFlight int, ttft time.Duration) {
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	f, ok := p.fits[replicaID]
	if !ok {
		f = &ttftFit{at: now}
		p.fits[replicaID] = f
	}
	f.decay(now, p.tau)
	x, y := float64(inFlight), ttft.Seconds()
	f.w++
	f.sx += x
	f.sy += y
	f.sxx += x * x
	f.sxy += x * y
}

// predictor returns a function predicting, in seconds, the TTFT of a
// request sent to a replica now holding inFlight requests; ok is false
// while the replica's decayed sample weight is under minSamples (never
// observed, or not for several windows). The function must be called
// before unlock, which the caller calls once it is done.
func (p *ttftPredictor) predictor() (predict func(replicaID string, inFlight int) (float64, bool), unlock func()) {
	now := p.now()
	p.mu.Lock()
	return func(id string, inFlight int) (float64, bool) {
		f, ok := p.fits[id]
		if !ok {
			return 0, false
		}
		f.decay(now, p.tau)
		if f.w < p.minSamples {
			return 0, false
		}
		a, b := f.line()
		return max(a+b*float64(inFlight), 0), true
	}, p.mu.Unlock
}

// decay ages the sums to now.
func (f *ttftFit) decay(now time.Time, tau float64) {
	d := now.Sub(f.at).Seconds()
	if d <= 0 {
		return
	}
	k := math.Exp(-d / tau)
	f.w *= k
	f.sx *= k
	f.sy *= k
	f.sxx *= k
	f.sxy *= k
	f.at = now
}

// line returns the weighted least-squares intercept and slope. A replica
// seen at (nearly) one load has no slope to fit, and a negative slope is
// noise (more work never makes the first token come sooner): both give the
// weighted mean as a flat line, which the next samples at other loads
// correct.
func (f *ttftFit) line() (a, b float64) {
	mean := f.sy / f.w
	varX := f.sxx/f.w - (f.sx/f.w)*(f.sx/f.w)
	if varX < 1e-6 {
		return mean, 0
	}
	b = (f.sxy/f.w - (f.sx/f.w)*mean) / varX
	if b <= 0 || math.IsNaN(b) {
		return mean, 0
	}
	return mean - b*f.sx/f.w, b
}
