package sim

import (
	"fmt"
	"math"
	"time"
)

// SetSlowdown makes the replica factor times slower from now on: every
// simulated delay computed after the call (a request's prefill, each later
// token's gap, a non-streaming request's whole decode) is multiplied by
// factor on top of the request's jitter. 1 is the configured speed, 2 a
// replica at half speed (a degraded or throttled GPU). Requests already
// running change speed at their next delay, as on a real GPU whose clock
// drops mid-batch. factor must be finite and > 0. Safe for concurrent use.
func (s *Server) SetSlowdown(factor float64) error {
	if !(factor > 0) || math.IsInf(factor, 1) {
		return fmt.Errorf("sim: slowdown must be a finite number > 0, got %v", factor)
	}
	s.slowdown.Store(math.Float64bits(factor))
	return nil
}

// Slowdown is the factor SetSlowdown last set (1 until it is called).
func (s *Server) Slowdown() float64 {
	if b := s.slowdown.Load(); b != 0 {
		return math.Float64frombits(b)
	}
	return 1
}

// delay is d scaled by the request's jitter factor and the replica's
// current slowdown.
func (s *Server) delay(d time.Duration, j *job) time.Duration {
	return scale(d, j.speed*s.Slowdown())
}
