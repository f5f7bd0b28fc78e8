package router

import (
	"errors"

	"github.com/triage-gw/triage/batcher"
)

// Errors of the pipeline. A front end maps them to its own answers (the HTTP layer does so in
// one place): ErrQueueFull, ErrBudgetExceeded and ErrSlowSaturated → 429, ErrClosed → 503
// shutting down, ErrNoModel → 503, *UnclassifiableError and ErrNoText → 400, *ReloadError → 500.
var (
	// ErrQueueFull: the classifier's queue is full, or its expected wait is over
	// batcher.max_queue_delay. Shed the request; it is safe to retry later.
	ErrQueueFull = batcher.ErrQueueFull
	// ErrClosed: the router is shutting down (its batcher has stopped, or Close was called).
	ErrClosed = batcher.ErrClosed
	// ErrNoModel: no classifier model is loaded (only after Close).
	ErrNoModel = errors.New("no classifier model loaded")
	// ErrBudgetExceeded: the classification did not come within routing.classify_budget and
	// routing.fallback is reject. The classification goes on and fills the cache; a retry
	// of the same text is likely to hit it.
	ErrBudgetExceeded = errors.New("the classification took longer than routing.classify_budget")
	// ErrSlowSaturated: a request pinned to the slow pool found every slow-path slot taken.
	// It is safe to retry later.
	ErrSlowSaturated = errors.New("every slow-path slot is taken (decision.max_slow_concurrency)")
	// ErrNoText: a request without text to classify and routing.fallback is reject.
	ErrNoText = errors.New("the request has no user text to classify (only images, audio or files) and routing.fallback is reject")
)

// UnclassifiableError is a text the classifier refuses to read (for example one its
// tokenizer rejects). Only the request carrying it fails; the others in its batch are
// classified.
type UnclassifiableError struct{ Err error }

func (e *UnclassifiableError) Error() string {
	return "the classifier cannot read this text: " + e.Err.Error()
}

func (e *UnclassifiableError) Unwrap() error { return e.Err }
