// Package upstream holds the backend pools, their replicas, and everything
// between choosing a replica and streaming its answer back.
//
// # Purpose
//
// A Pool is a set of interchangeable replicas of one model (the fast pool or
// the slow pool). Pool.Do takes one request, asks the pool's Admitter whether
// it may enter, builds a Candidate for every replica that may take it, lets
// the pool's policy.Picker choose, and proxies the request over net/http. The
// response body streams through unbuffered, so SSE chunks reach the caller as
// the replica writes them. A try that fails before the first response byte
// in a way the pool's retry rule lists (RetryConfig: by default only failures
// that say the replica did not execute the request) is tried again, by default
// once, on another replica (see Pool.Do).
//
// The replica policies (the policy.Picker implementations) live in package
// upstream/policy, which builds the one a PoolConfig.Policy names; the pool
// knows its picker only by that interface. Admission (the Admitter
// implementations) stays here.
//
// Signals: a replica's in-flight count is router-local and exact. Queue
// depth, running batch and KV-cache utilisation are scraped from the
// replica's Prometheus /metrics every ScrapeInterval, under the names of
// the replica's engine (vLLM, SGLang, llama.cpp or TGI, set or detected:
// engine.go), and are stale by up to that interval; after three intervals
// without a successful scrape the candidate is marked not Fresh, its last
// values kept. An engine without a KV-cache gauge leaves the candidate's
// KVUnknown set. Token rates and mean TTFT and time per output token are
// derived from the engine's counters and histograms by comparing each
// scrape with the previous successful one (see derive).
//
// KV-cache events: a replica with kv_events (vLLM's --kv-events-config)
// has a kvevents.Subscriber that keeps an index of the blocks its engine
// reports holding. Before a pick the pool asks one such replica's POST
// /tokenize for the prompt's token ids (bounded by kv_events.tokenize_timeout,
// cached by the prompt's hash) and hands the policy a policy.CacheView over
// the indexes; a replica whose events are down or silent, or a request that
// cannot be tokenized, is scored by the policy's own guess. After the pick
// the request's new blocks count as held by the chosen replica for
// kv_events.pending_ttl. Each gateway of a fleet subscribes itself.
//
// Disaggregation: a pool whose replicas include role prefill runs a chat or
// completion request in two legs (DisaggregationConfig, disagg.go): a
// non-streaming max_tokens 1 prefill on a prefill replica picked by the
// prefill policy, then the client's request carrying the prefill's
// kv_transfer_params, unchanged, on a decode replica picked by the decode
// policy. A decode leg is never sent twice with the same parameters: any
// failure before it has started runs the request whole on a decode or both
// replica (Response.Fallback says why). Whole requests never go to a prefill
// replica. Each leg's policy gets the Done of its own picks.
//
// Fleet mode: when several gateways share replicas, Options.Remote adds the other gateways'
// in-flight counts (as of their latest snapshots) to each Candidate's InFlight, and
// Options.Picks receives what the policy shares about each pick (policy.Sharer), which the
// other gateways apply to their own copy of the policy through ObservePick. Package fleet
// implements both over Redis; this package does not know it. MaxInFlightPerReplica stays a
// per-gateway cap on this gateway's own requests.
//
// Health: a replica takes requests unless it is draining (operator), failing
// its active health checks, or passively ejected after consecutive request
// failures (until its cooldown ends; then one failure ejects it again, one
// success clears the record).
//
// Accounting: the response body is watched as it passes for the replica's "usage" object (a
// JSON body's, or the usage chunk of a stream whose request set
// stream_options.include_usage). When Body is closed its prompt and completion tokens are
// counted per replica, and priced at PoolConfig.Prices and Options.BaselinePrices when set; a
// 2xx answer without one is counted as unmetered. The pool never changes what it forwards
// for this: asking a replica for a stream's usage, and hiding that chunk from a client that
// did not ask, is the HTTP layer's choice (PoolConfig.AskStreamUsage, IsUsageChunk).
//
// # Concurrency
//
// Do, Healthy, Replicas, Drain and the response bodies may be used from any
// number of goroutines. Per replica, the in-flight counter and the latest
// scrape are atomics read on every request; the health fields change rarely
// and sit under a per-replica mutex that is never held across I/O.
// A Response's Read and Close may race (Close unblocks a stuck Read).
//
// # Lifecycle
//
// New validates the config and builds the pool; it starts nothing. Run owns
// every background goroutine (the health-check loop and the scrape loop,
// each of which fans out one short-lived goroutine per replica and waits for
// them) under an errgroup, recovers and logs their panics, and returns once
// ctx is done and all of them have exited, closing the pool's idle
// connections. Do works without Run, with every replica assumed healthy.
//
// Every Response's Body must be closed exactly once. Close ends the
// request's accounting: the replica's in-flight count, the outcome metric
// and the picker's Done (for pickers implementing policy.Finisher), and
// cancels the upstream request if it was not read to its end. Cancelling the ctx given
// to Do cancels the upstream request at any point. A picker implementing
// policy.TTFTObserver is told, from the Body's first Read that brings a
// streamed 2xx answer's first data event, how long that took and the
// in-flight count its pick saw. For a graceful shutdown,
// stop sending requests and wait for InFlight to reach zero.
package upstream
