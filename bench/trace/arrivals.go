package trace

import (
	"math/rand/v2"
	"time"
)

// PoissonArrivals returns the arrival offsets of a Poisson process of rate
// per second: exponential gaps, strictly inside (0, window] when window > 0,
// at most limit of them when limit > 0.
func PoissonArrivals(rng *rand.Rand, rate float64, window time.Duration, limit int) []time.Duration {
	var out []time.Duration
	var t float64 // seconds
	for limit <= 0 || len(out) < limit {
		t += rng.ExpFloat64() / rate
		at := time.Duration(t * float64(time.Second))
		if window > 0 && at > window {
			break
		}
		out = append(out, at)
	}
	return out
}
