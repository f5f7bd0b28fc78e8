package upstream

import (
	"math/rand/v2"
	"sync"
)

// RoundRobin cycles through the candidates, ignoring load (a baseline).
// When the candidate list changes size the cycle continues from the same
// counter, so a replica may be skipped or repeated once.
//
// Concurrency: lock-free; safe for concurrent Pick.
type RoundRobin struct {
	traced
	rr rotor
}

var _ Picker = (*RoundRobin)(nil)

// NewRoundRobin returns a round-robin picker.
func NewRoundRobin() *RoundRobin { return &RoundRobin{} }

// Pick implements Picker. Traces score candidates by InFlight (lower is
// better), so regret shows the load round-robin ignores.
func (p *RoundRobin) Pick(_ *Request, cands []Candidate) int {
	i := int((p.rr.n.Add(1) - 1) % uint64(len(cands)))
	if t := p.tracer; t != nil {
		t.Record(cands, inFlightScores(nil, cands), i, true, "")
	}
	return i
}

// Random picks a candidate uniformly at random (a baseline).
//
// Concurrency: safe for concurrent Pick; the generator sits behind a mutex.
type Random struct {
	traced
	mu  sync.Mutex
	rng *rand.Rand
}

var _ Picker = (*Random)(nil)

// NewRandom returns a random picker. seed 0 draws a fresh seed; any other
// value gives a reproducible sequence.
func NewRandom(seed uint64) *Random {
	if seed == 0 {
		seed = rand.Uint64()
	}
	return &Random{rng: rand.New(rand.NewPCG(seed, seed^0x6a09e667f3bcc909))}
}

// Pick implements Picker. Traces score candidates by InFlight (lower is
// better).
func (p *Random) Pick(_ *Request, cands []Candidate) int {
	p.mu.Lock()
	i := p.rng.IntN(len(cands))
	p.mu.Unlock()
	if t := p.tracer; t != nil {
		t.Record(cands, inFlightScores(nil, cands), i, true, "")
	}
	return i
}
