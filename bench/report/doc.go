// Package report is what a benchmark run writes about itself: where it ran
// ([Machine], and how noisy the machine was, [StartTimerProbe]), what each
// scenario found ([Scenario] with its summary [Metric] lines, rendered by
// [WriteScenarios]), and the formatting and file helpers that keep every
// report's numbers in the same shape ([Millis], [Counts], [Finite], [JSON],
// [WriteFiles]).
//
// Reports are markdown for people and JSON for tools; both come from the
// same values, so a table and its JSON never disagree.
//
// # Concurrency
//
// Everything but the timer probe is a plain function of its arguments. The
// probe runs one goroutine of its own; its stop function may be called once,
// from any goroutine.
//
// # Lifecycle
//
// StartTimerProbe's goroutine runs until its ctx ends or stop is called, and
// stop waits for it. Nothing else outlives a call.
package report
