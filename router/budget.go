package router

import "github.com/triage-gw/triage/decision"

// SlowBudget bounds the requests on the slow path and reports its occupancy, which is the
// load the decision policy reacts to.
//
// Contract: TryAcquire never blocks; it takes one slot and reports true, or reports false
// when the budget is spent (the request is then shed to fast, never queued). Each successful
// TryAcquire is matched by exactly one Release, after the request's upstream response has
// ended. Active and Max may be a view that lags the truth (a fleet-wide budget); the local
// *decision.Semaphore is exact. All methods are safe for concurrent use.
type SlowBudget interface {
	TryAcquire() bool
	Release()
	Active() int
	Max() int
}

var _ SlowBudget = (*decision.Semaphore)(nil)
