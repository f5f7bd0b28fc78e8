package decision

import (
	"math"
	"sync"
	"time"
)

// ShareBudget caps the share of routed requests that go slow over a sliding window.
//
// It keeps a histogram of the P(slow) of the requests routed in the window and turns the cap
// into a threshold floor: the P(slow) that only MaxSlowShare of those requests exceed (the
// (1 − MaxSlowShare) quantile). A policy applies the floor through State.BudgetThreshold:
// slow iff P(slow) is above both its own (load) threshold and the floor, so the stricter rule
// wins. When the traffic's own slow share at the load threshold is below the cap the floor
// sits below the load threshold and changes nothing.
//
// The floor is fed forward from the scores, not back from the decisions: what went slow does
// not move it, so it cannot overshoot and swing back the way a controller chasing its own
// measured share does. After a change in the traffic mix it moves monotonically to the new
// quantile as the old requests leave the window: the share converges within one window (see
// the package benchmark). Two approximations, both documented where the budget is configured:
// scores are kept to 0.001, and requests with equal scores cannot be split, so a mass of equal
// scores at the quantile keeps the share below the cap rather than above it.
//
// Safe for concurrent use: one mutex, held for a histogram update or, every few requests, a
// scan of the histogram's 1000 bins.
type ShareBudget struct {
	max  float64
	slot time.Duration
	now  func() time.Time

	mu      sync.Mutex
	slots   [shareSlots]shareSlot
	cur     int64 // index of the current slot: now / slot
	hist    [shareBins]uint32
	n, slow int
	floor   float64 // the last computed floor
	pending int     // observations since floor was computed
	stale   bool    // the window changed in a way pending does not count (rotation)
}

type shareSlot struct {
	hist    [shareBins]uint32
	n, slow int
}

const (
	// shareSlots divides the window: a request leaves it between window·(1 − 1/shareSlots)
	// and window after it was routed.
	shareSlots = 20
	// shareBins is the histogram's resolution: P(slow) kept to 1/shareBins.
	shareBins = 1000
	// ShareMinSamples is how many routed requests the window must hold before the budget
	// applies: a quantile of a handful of scores would swing with each one.
	ShareMinSamples = 50
	// shareRecompute is how many observations may pass before the floor is recomputed.
	shareRecompute = 8
)

// NewShareBudget returns the budget cfg configures. With cfg.MaxSlowShare 0 it sets no floor
// and only measures the window's slow share. cfg must be valid. now tells time; nil means
// time.Now.
func NewShareBudget(cfg Config, now func() time.Time) *ShareBudget {
	if now == nil {
		now = time.Now
	}
	b := &ShareBudget{max: cfg.MaxSlowShare, slot: cfg.ShareWindow / shareSlots, now: now}
	b.cur = b.index(now())
	return b
}

func (b *ShareBudget) index(t time.Time) int64 { return t.UnixNano() / int64(b.slot) }

// Max returns the configured cap; 0 when there is none.
func (b *ShareBudget) Max() float64 { return b.max }

// Observe records one routed request: its P(slow) and whether it went slow. A NaN score
// is not recorded.
func (b *ShareBudget) Observe(pSlow float64, slow bool) {
	if math.IsNaN(pSlow) {
		return
	}
	i := min(max(int(pSlow*shareBins), 0), shareBins-1)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advance()
	s := &b.slots[b.cur%shareSlots]
	s.hist[i]++
	s.n++
	b.hist[i]++
	b.n++
	if slow {
		s.slow++
		b.slow++
	}
	b.pending++
}

// Threshold returns the floor: the P(slow) a request must exceed for the slow share of the
// window to stay within the cap. 0 (no floor) while the window holds fewer than
// ShareMinSamples requests or when the cap is not binding.
func (b *ShareBudget) Threshold() float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advance()
	if b.stale || b.pending >= shareRecompute {
		b.floor = b.quantile()
		b.stale, b.pending = false, 0
	}
	return b.floor
}

// Share returns the share of the window's routed requests that went slow, and how many
// requests it holds.
func (b *ShareBudget) Share() (share float64, n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advance()
	if b.n == 0 {
		return 0, 0
	}
	return float64(b.slow) / float64(b.n), b.n
}

// advance expires the slots that the clock has moved past; called with mu held.
func (b *ShareBudget) advance() {
	k := b.index(b.now())
	if k <= b.cur {
		return
	}
	for j := b.cur + 1; j <= k && j <= b.cur+shareSlots; j++ {
		s := &b.slots[j%shareSlots]
		if s.n > 0 {
			for i, c := range s.hist {
				b.hist[i] -= c
			}
			b.n -= s.n
			b.slow -= s.slow
			*s = shareSlot{}
			b.stale = true
		}
	}
	b.cur = k
}

// quantile is the lowest bin edge that at most max of the window's scores exceed; called
// with mu held.
func (b *ShareBudget) quantile() float64 {
	if b.max == 0 || b.n < ShareMinSamples {
		return 0
	}
	allowed := b.max * float64(b.n)
	above := 0
	for i := shareBins - 1; i >= 0; i-- {
		above += int(b.hist[i])
		if float64(above) > allowed {
			return float64(i+1) / shareBins
		}
	}
	return 0
}
