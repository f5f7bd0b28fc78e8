// Package sse times streamed OpenAI-style answers (server-sent events) as a
// client sees them.
//
// [Read] consumes one text/event-stream body and reports the time to the
// first data event (the client's TTFT), the time to the [DONE] marker (end to
// end) and how many data events came before it. Only "data:" lines count;
// comments, "event:" and other fields are ignored, and the payloads are not
// parsed, so the reader adds as little as possible to what it measures.
//
// # Concurrency
//
// Read keeps no state between calls and may run on many goroutines at once,
// each with its own body.
//
// # Lifecycle
//
// Read returns when the body ends, fails, or has delivered [DONE] (the rest
// is then drained). The caller owns the body and closes it.
package sse
