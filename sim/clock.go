package sim

import (
	"context"
	"time"
)

// Clock is the simulator's source of time. Every simulated delay goes
// through Sleep, so a test can inject a Clock that returns at once, records
// the delays, or blocks until the test lets it go.
type Clock interface {
	Now() time.Time
	// Sleep waits d, or until ctx is done, and returns ctx.Err() in the
	// latter case. It is called for every delay the latency model computes,
	// even 0: once for prefill, then once per later token when streaming or
	// once for the whole decode when not; and first for StallFirstByte when
	// that is set.
	Sleep(ctx context.Context, d time.Duration) error
}

// WallClock is the wall clock, the Clock a Server uses unless told otherwise; its Sleep also
// serves callers that pace real time around a simulation (the benchmark's slowdown schedule).
var WallClock Clock = realClock{}

// realClock is the wall clock.
type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// scale multiplies d by the request's speed factor f.
func scale(d time.Duration, f float64) time.Duration {
	return time.Duration(float64(d) * f)
}
