package batcher

import "time"

// Clock is the batcher's source of time: timestamps for queue and inference timing, and the
// MaxWait timer. Tests inject a fake to drive the window without sleeping.
type Clock interface {
	Now() time.Time
	// NewTimer returns a timer that sends once on its channel after d.
	NewTimer(d time.Duration) Timer
}

// Timer is the part of *time.Timer the batcher uses.
type Timer interface {
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it did.
	Stop() bool
}

// realClock is the wall clock.
type realClock struct{}

func (realClock) Now() time.Time                 { return time.Now() }
func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time { return t.t.C }
func (t realTimer) Stop() bool          { return t.t.Stop() }
