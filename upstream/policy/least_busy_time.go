package policy

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
)

// LeastBusyTimeConfig tunes the least-busy-time policy.
type LeastBusyTimeConfig struct {
	// Window is the time constant of the busy-time average: time busy
	// counts with weight e^(−age/Window), so the last Window holds about
	// 63% of the weight. Default 10s.
	Window time.Duration `yaml:"window" json:"window"`
}

func init() {
	register("least-busy-time", "least_busy_time", DefaultLeastBusyTimeConfig,
		func(c LeastBusyTimeConfig, env Env) (Picker, error) { return picker(NewLeastBusyTime(c, env.Now)) })
}

// DefaultLeastBusyTimeConfig returns a 10-second window.
func DefaultLeastBusyTimeConfig() LeastBusyTimeConfig {
	return LeastBusyTimeConfig{Window: 10 * time.Second}
}

// ValidateAt reports every invalid field, each named from path
// ("pools.fast.policy.least_busy_time" in a pool's config).
func (c LeastBusyTimeConfig) ValidateAt(path string) error {
	var errs []error
	if c.Window < time.Millisecond || c.Window > time.Hour {
		errs = append(errs, fmt.Errorf("%s.window: must be in [1ms, 1h], got %v", path, c.Window))
	}
	return errors.Join(errs...)
}

// LeastBusyTime picks the candidate that was busy for the smallest share
// of the recent past, after AIBrix's least-busy-time router.
//
// Signal: the share of recent time during which the replica had at least
// one of this gateway's requests in flight, measured by the policy itself
// from its picks and their Done calls, averaged with exponentially
// decaying weights (time constant Window). AIBrix reads a GPU busy-time
// ratio that no serving engine exports (it is a placeholder there); vLLM
// has none either, and a replica holding no request is idle however its
// GPU is measured, so the gateway's own view is the signal.
//
// Staleness: none; the share is brought up to the decision's time at every
// pick. In fleet mode it counts only this gateway's requests: a replica
// kept busy by another gateway looks idle here.
//
// Ties: fewest in-flight requests (fleet-wide in fleet mode), then
// round-robin; under sustained load every replica reads 1 and the policy
// acts as least-request. Missing signal: none; a replica never picked
// reads 0 (idle), so a new replica is tried first.
//
// Concurrency: one mutex guards the per-replica state, held for one
// decision or one Done. Done must name the replica the request was picked
// for; every pick needs exactly one Done (the pool guarantees both).
type LeastBusyTime struct {
	traced
	tau float64 // Window in seconds
	now func() time.Time
	rr  rotor

	mu       sync.Mutex
	replicas map[string]*busyTime // replica ID → its state; one entry per replica ever picked or offered
}

// busyTime is one replica's decaying busy share.
type busyTime struct {
	open  int       // this gateway's requests picked for the replica and not yet Done
	share float64   // weighted share of time busy, in [0, 1], as of at
	at    time.Time // when share was last brought up to date
}

var (
	_ Picker   = (*LeastBusyTime)(nil)
	_ Finisher = (*LeastBusyTime)(nil)
)

// NewLeastBusyTime validates cfg and returns a least-busy-time picker.
// now is the clock; nil means time.Now.
func NewLeastBusyTime(cfg LeastBusyTimeConfig, now func() time.Time) (*LeastBusyTime, error) {
	if err := cfg.ValidateAt("least_busy_time"); err != nil {
		return nil, err
	}
	if now == nil {
		now = time.Now
	}
	return &LeastBusyTime{tau: cfg.Window.Seconds(), now: now, replicas: make(map[string]*busyTime)}, nil
}

// Pick implements Picker.
func (p *LeastBusyTime) Pick(_ *Request, cands []Candidate) int {
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range cands {
		p.advance(cands[i].ID, now)
	}
	chosen := pickLowest(cands, func(c *Candidate) (float64, bool) {
		return p.replicas[c.ID].share, true
	}, &p.rr, p.tracer)
	p.replicas[cands[chosen].ID].open++
	return chosen
}

// Done implements Finisher: the request no longer keeps its replica busy.
// A Done for a replica with nothing open is ignored.
func (p *LeastBusyTime) Done(_ *Request, replicaID string, _ int) {
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if b := p.advance(replicaID, now); b.open > 0 {
		b.open--
	}
}

// BusyShare returns the replica's busy share as of its latest update, for
// tests and status pages; 0 for a replica never seen.
func (p *LeastBusyTime) BusyShare(replicaID string) float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if b, ok := p.replicas[replicaID]; ok {
		return b.share
	}
	return 0
}

// advance brings the replica's share up to now and returns its state,
// creating it (idle) on first sight. Over an interval of length d the
// replica was busy throughout if it had a request open at its start, since
// opens and closes happen only at picks and Dones, which call advance
// first. Caller holds p.mu.
func (p *LeastBusyTime) advance(id string, now time.Time) *busyTime {
	b, ok := p.replicas[id]
	if !ok {
		b = &busyTime{at: now}
		p.replicas[id] = b
		return b
	}
	if d := now.Sub(b.at).Seconds(); d > 0 {
		keep := math.Exp(-d / p.tau)
		b.share *= keep
		if b.open > 0 {
			b.share += 1 - keep
		}
		b.at = now
	}
	return b
}
