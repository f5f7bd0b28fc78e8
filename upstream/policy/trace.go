package policy

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// TraceConfig turns on decision tracing (BLIS "counterfactual regret"):
// for each pick, the top-k candidates by the policy's own score, the one
// chosen, and how much score the choice gave up.
type TraceConfig struct {
	// Enabled turns tracing on. Default false: tracing costs a lock and a
	// copy of k candidates per decision.
	Enabled bool `yaml:"enabled" json:"enabled"`
	// TopK is how many best-scored candidates each record keeps. Default 3.
	TopK int `yaml:"top_k" json:"top_k"`
	// Capacity is how many recent decisions are kept; older ones are
	// overwritten. Default 1024.
	Capacity int `yaml:"capacity" json:"capacity"`
}

// DefaultTraceConfig returns tracing switched off with its defaults filled.
func DefaultTraceConfig() TraceConfig {
	return TraceConfig{TopK: 3, Capacity: 1024}
}

// ValidateAt reports every invalid field, each named from path
// ("pools.fast.policy.trace" in a pool's config).
func (c TraceConfig) ValidateAt(path string) error {
	var errs []error
	if c.TopK < 1 || c.TopK > 64 {
		errs = append(errs, fmt.Errorf("%s.top_k: must be in [1, 64], got %d", path, c.TopK))
	}
	if c.Capacity < 1 || c.Capacity > 1<<20 {
		errs = append(errs, fmt.Errorf("%s.capacity: must be in [1, %d], got %d", path, 1<<20, c.Capacity))
	}
	return errors.Join(errs...)
}

// TraceCandidate is one candidate as the policy scored it.
type TraceCandidate struct {
	ID       string  `json:"id"`
	Score    float64 `json:"score"`
	InFlight int     `json:"in_flight"`
}

// TraceRecord is one routing decision.
type TraceRecord struct {
	// Seq numbers decisions from 1 in the order they were recorded.
	Seq  uint64    `json:"seq"`
	Time time.Time `json:"time"`
	// Note names the branch of the policy that decided (for example
	// "affinity", "imbalance", "prefix-match"); empty when there is one.
	Note string `json:"note,omitempty"`
	// LowerIsBetter tells how to read Score: lmetric, vtc-basic and the
	// load-only policies minimise, weighted and prefix-cache maximise.
	LowerIsBetter bool `json:"lower_is_better"`
	// Chosen is the candidate picked.
	Chosen TraceCandidate `json:"chosen"`
	// Regret is how much worse the chosen score is than the best one,
	// in the policy's own units; always >= 0. It is non-zero when a policy
	// trades score for something else (load filter, affinity, rotation).
	Regret float64 `json:"regret"`
	// Top holds the best-scored candidates, best first (ties in candidate
	// order), at most TopK of them.
	Top []TraceCandidate `json:"top"`
}

// Tracer keeps the most recent decisions in a ring buffer. A nil *Tracer
// records nothing, so policies call it unconditionally.
//
// Concurrency: safe for concurrent use; Record takes a short lock and does
// not allocate once the ring has been filled once.
type Tracer struct {
	now  func() time.Time
	topK int

	mu   sync.Mutex
	ring []TraceRecord
	seq  uint64
}

// NewTracer returns a tracer keeping capacity records of topK candidates
// each. now is the clock; nil means time.Now.
func NewTracer(topK, capacity int, now func() time.Time) *Tracer {
	if now == nil {
		now = time.Now
	}
	topK = max(topK, 1)
	ring := make([]TraceRecord, max(capacity, 1))
	for i := range ring {
		ring[i].Top = make([]TraceCandidate, 0, topK)
	}
	return &Tracer{now: now, topK: topK, ring: ring}
}

// Record stores one decision. scores[i] is the policy's score for
// cands[i]; chosen indexes cands. Callers may reuse scores afterwards.
func (t *Tracer) Record(cands []Candidate, scores []float64, chosen int, lowerIsBetter bool, note string) {
	if t == nil || chosen < 0 || chosen >= len(cands) || len(scores) < len(cands) {
		return
	}
	better := func(a, b float64) bool {
		if lowerIsBetter {
			return a < b
		}
		return a > b
	}
	now := t.now()

	t.mu.Lock()
	defer t.mu.Unlock()
	t.seq++
	r := &t.ring[int((t.seq-1)%uint64(len(t.ring)))]
	r.Seq, r.Time, r.Note, r.LowerIsBetter = t.seq, now, note, lowerIsBetter
	c := cands[chosen]
	r.Chosen = TraceCandidate{ID: c.ID, Score: scores[chosen], InFlight: c.InFlight}

	// Insertion into a list of at most topK: O(n·k) with k tiny.
	top := r.Top[:0]
	for i := range cands {
		s := scores[i]
		if len(top) == t.topK && !better(s, top[len(top)-1].Score) {
			continue
		}
		pos := len(top)
		for pos > 0 && better(s, top[pos-1].Score) {
			pos--
		}
		if len(top) < t.topK {
			top = append(top, TraceCandidate{})
		}
		copy(top[pos+1:], top[pos:len(top)-1])
		top[pos] = TraceCandidate{ID: cands[i].ID, Score: s, InFlight: cands[i].InFlight}
	}
	r.Top = top
	r.Regret = top[0].Score - r.Chosen.Score
	if lowerIsBetter {
		r.Regret = -r.Regret
	}
	r.Regret = max(r.Regret, 0)
}

// Capacity returns how many records t keeps (0 for a nil Tracer): Recent
// never returns more.
func (t *Tracer) Capacity() int {
	if t == nil {
		return 0
	}
	return len(t.ring)
}

// Recent returns up to n of the latest decisions, oldest first. The
// records are copies; the caller may keep them.
func (t *Tracer) Recent(n int) []TraceRecord {
	if t == nil || n <= 0 {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	n = min(n, len(t.ring), int(min(t.seq, uint64(len(t.ring)))))
	out := make([]TraceRecord, 0, n)
	for s := t.seq - uint64(n) + 1; s <= t.seq; s++ {
		r := t.ring[int((s-1)%uint64(len(t.ring)))]
		r.Top = append([]TraceCandidate(nil), r.Top...)
		out = append(out, r)
	}
	return out
}

// Traceable is implemented by every picker in this package, so a caller
// holding a Picker from New can read its decisions.
type Traceable interface {
	// Tracer returns the picker's tracer, nil when tracing is off.
	Tracer() *Tracer
}

// traced is embedded by the policies to carry their optional tracer.
type traced struct{ tracer *Tracer }

// Tracer returns the tracer attached with SetTracer, or nil.
func (t *traced) Tracer() *Tracer { return t.tracer }

// SetTracer attaches tr (nil detaches). Call it before the first Pick: the
// field is read without a lock.
func (t *traced) SetTracer(tr *Tracer) { t.tracer = tr }

// inFlightScores fills buf with each candidate's InFlight, the score the
// load-only policies are traced with (lower is better).
func inFlightScores(buf []float64, cands []Candidate) []float64 {
	buf = growFloats(buf, len(cands))
	for i, c := range cands {
		buf[i] = float64(c.InFlight)
	}
	return buf
}
