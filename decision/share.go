package decision

import (
	"math"
	"sync"
	"time"
)

// ShareCap caps the share of routed requests, or of their tokens, that go slow over a
// sliding window.
//
// It keeps a histogram of the P(slow) of the requests routed in the window and turns the cap
// into a threshold floor: the P(slow) that only MaxSlowShare of those requests exceed (the
// (1 − MaxSlowShare) quantile). A policy applies the floor through State.ShareFloor:
// slow iff P(slow) is above both its own (load) threshold and the floor, so the stricter rule
// wins. When the traffic's own slow share at the load threshold is below the cap the floor
// sits below the load threshold and changes nothing.
//
// In the tokens unit (Config.ShareUnit) each request weighs its tokens: the histogram sums
// tokens per bin, the floor is the lowest P(slow) such that the requests above it carry at
// most MaxSlowShare of the window's tokens, and Share is the slow requests' share of the
// tokens. Tokens are known when the request completes, so it is observed then
// (ObserveTokens), with the score and path of its routing. A request whose tokens never
// arrive (an unmetered stream, an upstream failure) is observed with Observe and weighs the
// window's mean tokens per metered request, taken when the floor or share is computed; with
// no metered request in the window every request weighs the same and the tokens unit is the
// requests unit.
//
// The floor is fed forward from the scores, not back from the decisions: what went slow does
// not move it, so it cannot overshoot and swing back the way a controller chasing its own
// measured share does. After a change in the traffic mix it moves monotonically to the new
// quantile as the old requests leave the window: the share converges within one window (see
// the package benchmark). Two approximations, both documented where the cap is configured:
// scores are kept to 0.001, and requests with equal scores cannot be split, so a mass of equal
// scores at the quantile keeps the share below the cap rather than above it.
//
// Safe for concurrent use: one mutex, held for a histogram update or, every few requests, a
// scan of the histogram's 1000 bins. Memory is fixed: 21 histograms of 1000 bins.
type ShareCap struct {
	max    float64
	tokens bool // the tokens unit
	slot   time.Duration
	now    func() time.Time

	mu      sync.Mutex
	slots   [shareSlots]shareSlot
	cur     int64     // index of the current slot: now / slot
	win     shareSlot // the window: the slots summed
	floor   float64   // the last computed floor
	pending int       // observations since floor was computed
	stale   bool      // the window changed in a way pending does not count (rotation)
}

// shareSlot is the histogram of part of the window, or of all of it. A request of known
// weight (each one in the requests unit, a metered one in the tokens unit) adds its weight
// to weight; one of unknown weight counts in unmetered.
type shareSlot struct {
	weight    [shareBins]uint64
	unmetered [shareBins]uint32
	// metered and unmet count the requests of known and unknown weight; w is the known
	// weight, slowW and slowUnmet their slow part.
	metered, unmet, slowUnmet int
	w, slowW                  uint64
}

func (s *shareSlot) n() int { return s.metered + s.unmet }

const (
	// shareSlots divides the window: a request leaves it between window·(1 − 1/shareSlots)
	// and window after it was observed.
	shareSlots = 20
	// shareBins is the histogram's resolution: P(slow) kept to 1/shareBins.
	shareBins = 1000
	// ShareMinSamples is how many routed requests the window must hold before the cap
	// applies: a quantile of a handful of scores would swing with each one.
	ShareMinSamples = 50
	// shareRecompute is how many observations may pass before the floor is recomputed.
	shareRecompute = 8
)

// NewShareCap returns the cap cfg configures. With cfg.MaxSlowShare 0 it sets no floor
// and only measures the window's slow share. cfg must be valid. now tells time; nil means
// time.Now.
func NewShareCap(cfg Config, now func() time.Time) *ShareCap {
	if now == nil {
		now = time.Now
	}
	b := &ShareCap{max: cfg.MaxSlowShare, tokens: cfg.ShareUnit == ShareUnitTokens, slot: cfg.ShareWindow / shareSlots, now: now}
	b.cur = b.index(now())
	return b
}

func (b *ShareCap) index(t time.Time) int64 { return t.UnixNano() / int64(b.slot) }

// Max returns the configured cap; 0 when there is none.
func (b *ShareCap) Max() float64 { return b.max }

// Unit returns what the share counts: ShareUnitRequests or ShareUnitTokens.
func (b *ShareCap) Unit() string {
	if b.tokens {
		return ShareUnitTokens
	}
	return ShareUnitRequests
}

// Observe records one routed request: its P(slow) and whether it went slow. In the tokens
// unit it is a request whose tokens are unknown: it weighs the window's mean tokens per
// metered request. A NaN score is not recorded.
func (b *ShareCap) Observe(pSlow float64, slow bool) {
	b.observe(pSlow, slow, 1, !b.tokens)
}

// ObserveTokens records one completed routed request and the tokens (prompt and completion)
// it cost; in the requests unit the tokens are ignored. Negative tokens mean unknown, as
// Observe. A NaN score is not recorded.
func (b *ShareCap) ObserveTokens(pSlow float64, slow bool, tokens int) {
	if !b.tokens {
		b.observe(pSlow, slow, 1, true)
		return
	}
	b.observe(pSlow, slow, uint64(max(tokens, 0)), tokens >= 0)
}

func (b *ShareCap) observe(pSlow float64, slow bool, w uint64, metered bool) {
	if math.IsNaN(pSlow) {
		return
	}
	i := min(max(int(pSlow*shareBins), 0), shareBins-1)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advance()
	for _, s := range []*shareSlot{&b.slots[b.cur%shareSlots], &b.win} {
		if metered {
			s.weight[i] += w
			s.metered++
			s.w += w
			if slow {
				s.slowW += w
			}
		} else {
			s.unmetered[i]++
			s.unmet++
			if slow {
				s.slowUnmet++
			}
		}
	}
	b.pending++
}

// Threshold returns the floor: the P(slow) a request must exceed for the slow share of the
// window to stay within the cap. 0 (no floor) while the window holds fewer than
// ShareMinSamples requests or when the cap is not binding.
func (b *ShareCap) Threshold() float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advance()
	if b.stale || b.pending >= shareRecompute {
		b.floor = b.quantile()
		b.stale, b.pending = false, 0
	}
	return b.floor
}

// Share returns the share of the window's routed requests (in the tokens unit: of their
// tokens) that went slow, and how many requests the window holds.
func (b *ShareCap) Share() (share float64, n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advance()
	mean := b.meanWeight()
	total := float64(b.win.w) + mean*float64(b.win.unmet)
	if total == 0 {
		return 0, b.win.n()
	}
	return (float64(b.win.slowW) + mean*float64(b.win.slowUnmet)) / total, b.win.n()
}

// meanWeight is the weight of a request of unknown weight: the window's mean weight per
// request of known weight, or 1 when it holds none. Called with mu held.
func (b *ShareCap) meanWeight() float64 {
	if b.win.metered == 0 {
		return 1
	}
	return float64(b.win.w) / float64(b.win.metered)
}

// advance expires the slots that the clock has moved past; called with mu held.
func (b *ShareCap) advance() {
	k := b.index(b.now())
	if k <= b.cur {
		return
	}
	for j := b.cur + 1; j <= k && j <= b.cur+shareSlots; j++ {
		s := &b.slots[j%shareSlots]
		if s.n() > 0 {
			for i := range s.weight {
				b.win.weight[i] -= s.weight[i]
				b.win.unmetered[i] -= s.unmetered[i]
			}
			b.win.metered -= s.metered
			b.win.unmet -= s.unmet
			b.win.slowUnmet -= s.slowUnmet
			b.win.w -= s.w
			b.win.slowW -= s.slowW
			*s = shareSlot{}
			b.stale = true
		}
	}
	b.cur = k
}

// quantile is the lowest bin edge such that the scores above it carry at most max of the
// window's weight; called with mu held.
func (b *ShareCap) quantile() float64 {
	if b.max == 0 || b.win.n() < ShareMinSamples {
		return 0
	}
	mean := b.meanWeight()
	allowed := b.max * (float64(b.win.w) + mean*float64(b.win.unmet))
	above := 0.0
	for i := shareBins - 1; i >= 0; i-- {
		above += float64(b.win.weight[i]) + mean*float64(b.win.unmetered[i])
		if above > allowed {
			return float64(i+1) / shareBins
		}
	}
	return 0
}
