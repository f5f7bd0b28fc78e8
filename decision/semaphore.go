package decision

import (
	"fmt"
	"sync/atomic"
)

// Semaphore bounds and counts the requests on the slow path. It never blocks: when it is full
// the caller sheds the request to the fast path (ReasonSlowSaturated), so the slow path cannot
// build an unbounded queue. Its occupancy is the load the Quadratic policy reacts to.
//
// It is lock-free and safe for concurrent use. The zero value is not usable; call NewSemaphore.
type Semaphore struct {
	active atomic.Int64
	max    int64
}

// NewSemaphore returns a semaphore with size slots. It panics if size < 1; Config.Validate
// rejects such a configuration before it gets here.
func NewSemaphore(size int) *Semaphore {
	if size < 1 {
		panic(fmt.Sprintf("decision: NewSemaphore: size must be >= 1, got %d", size))
	}
	return &Semaphore{max: int64(size)}
}

// TryAcquire takes a slot if one is free and reports whether it did. It never waits.
func (s *Semaphore) TryAcquire() bool {
	for {
		cur := s.active.Load()
		if cur >= s.max {
			return false
		}
		if s.active.CompareAndSwap(cur, cur+1) {
			return true
		}
	}
}

// Release frees a slot taken by a successful TryAcquire. Releasing more than was acquired is a
// caller bug that would silently corrupt the load signal, so Release panics instead of letting
// the count go negative (as sync.Mutex.Unlock and semaphore.Weighted.Release do).
func (s *Semaphore) Release() {
	for {
		cur := s.active.Load()
		if cur <= 0 {
			panic("decision: Semaphore.Release without a matching TryAcquire")
		}
		if s.active.CompareAndSwap(cur, cur-1) {
			return
		}
	}
}

// Active returns the number of slots held now.
func (s *Semaphore) Active() int { return int(s.active.Load()) }

// Max returns the number of slots.
func (s *Semaphore) Max() int { return int(s.max) }

// Load returns Active/Max in [0, 1].
func (s *Semaphore) Load() float64 { return float64(s.active.Load()) / float64(s.max) }
