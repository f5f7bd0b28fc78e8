// Package trace generates seeded multi-turn chat workloads for replaying
// against LLM replicas, the input of triage-bench's replica-policy sweep.
//
// A [Trace] mimics agent-style sessions, the traffic that makes prefix-cache
// aware routing matter: several sessions share each of a few long system
// prompts, every turn resends the whole conversation so far, so later turns
// extend the prompt of earlier ones, and some sessions are heavy (more turns,
// each with a long document attached), or, for fairness studies, one heavy
// user issues a set share of the requests among many light users
// (Config.HeavyUserShare). Arrivals are a Poisson process; see
// [Config] for every knob and [DefaultConfig] for the sweep's values. Texts
// come from Dolly rows (package dolly); prompts are rendered and counted the
// way package sim's replicas render and cache them, so [Trace.Stats] can
// report the trace's KV-cache working set in the replicas' own blocks.
//
// [Generate] is deterministic: the same Config and rows give the same trace,
// request for request, on every run and machine.
//
// # Concurrency
//
// Generate keeps no state between calls. A Trace is not modified after
// Generate returns it, so replays may read it from many goroutines.
//
// # Lifecycle
//
// Nothing to start or stop.
package trace
