// Package stats summarises what a benchmark measured: latency percentiles,
// means, and how evenly load was spread over replicas.
//
// Percentiles are nearest-rank (see [Summary]): always a value that was
// observed, never an interpolation, so a p99 of 50 samples is their maximum
// rather than an invented value between the two largest.
//
// # Concurrency
//
// Every function is pure. [SummarizeFloats] sorts its argument in place, so a
// caller that shares the slice must pass a copy; [Summarize] copies for it.
//
// # Lifecycle
//
// Nothing to start or stop: no state outlives a call.
package stats
