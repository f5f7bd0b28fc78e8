// Package promtext reads a server's Prometheus /metrics endpoint, so a
// benchmark can see what the server under load reports about itself (queue
// depth, in-flight requests, memory, batch sizes) beside what the client
// measured.
//
// [Scrape] fetches and parses one exposition; [Samples] maps each series to
// its value, with [Samples.Sum] adding a metric's series over all labels.
// Only the text format's sample lines are read: comments, types and
// timestamps are ignored, and histograms are just their _bucket, _sum and
// _count series. [Poll] scrapes periodically while a run goes on.
//
// # Concurrency
//
// Scrape and Parse keep no state and may be called from many goroutines.
// A Samples value is a plain map: safe to read concurrently, not to write.
// Poll's record function runs on Poll's goroutine only.
//
// # Lifecycle
//
// Poll's goroutine runs until its ctx ends or its stop function is called;
// stop waits for it. Nothing else outlives a call.
package promtext
