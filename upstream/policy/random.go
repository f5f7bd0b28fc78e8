package policy

import (
	"math/rand/v2"
	"sync"
)

// RandomConfig tunes the random policy.
type RandomConfig struct {
	// Seed fixes the random sequence (for reproducible benchmarks).
	// Default 0: a fresh seed per process.
	Seed uint64 `yaml:"seed" json:"seed"`
}

func init() {
	register("random", "random", func() RandomConfig { return RandomConfig{} }, func(c RandomConfig, _ Env) (Picker, error) {
		return NewRandom(c.Seed), nil
	})
}

// ValidateAt implements Section: every seed is valid.
func (RandomConfig) ValidateAt(string) error { return nil }

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
