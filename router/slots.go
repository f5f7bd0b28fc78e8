package router

import "github.com/triage-gw/triage/decision"

// SlowSlots bounds the requests on the slow path and reports its occupancy, which is the
// load the decision policy reacts to.
//
// Contract: TryAcquire never blocks; it takes one slot and reports true, or reports false
// when none is free (the request is then shed to fast, never queued). Each successful
// TryAcquire is matched by exactly one Release, after the request's upstream response has
// ended. Active and Max may be a view that lags the truth (the fleet's slots); the local
// *decision.Semaphore is exact. All methods are safe for concurrent use.
type SlowSlots interface {
	TryAcquire() bool
	Release()
	Active() int
	Max() int
}

var _ SlowSlots = (*decision.Semaphore)(nil)
