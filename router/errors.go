package router

import (
	"errors"

	"github.com/triage-gw/triage/batcher"
)

// Errors of the pipeline. A front end maps them to its own answers (the HTTP layer does so in
// one place): ErrQueueFull → 429, ErrClosed → 503 shutting down, ErrNoModel → 503,
// *UnclassifiableError → 400, *ReloadError → 500.
var (
	// ErrQueueFull: the classifier's queue is full, or its expected wait is over
	// batcher.max_queue_delay. Shed the request; it is safe to retry later.
	ErrQueueFull = batcher.ErrQueueFull
	// ErrClosed: the router is shutting down (its batcher has stopped, or Close was called).
	ErrClosed = batcher.ErrClosed
	// ErrNoModel: no classifier model is loaded (only after Close).
	ErrNoModel = errors.New("no classifier model loaded")
)

// UnclassifiableError is a text the classifier refuses to read (for example one its
// tokenizer rejects). Only the request carrying it fails; the others in its batch are
// classified.
type UnclassifiableError struct{ Err error }

func (e *UnclassifiableError) Error() string {
	return "the classifier cannot read this text: " + e.Err.Error()
}

func (e *UnclassifiableError) Unwrap() error { return e.Err }
