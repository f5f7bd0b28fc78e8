// Package vllmprefix is "triage-bench vllm-prefix": the replica policies measured on two
// real vLLM engines instead of the simulator. It starts two vLLM CPU engines (tiny-llama,
// block size 32, a KV cache small enough that a conversation's blocks get evicted, prefix
// caching on, KV-cache events published over ZeroMQ) once, then for each policy starts a
// gateway (bin/triage) in front of them, empties both engines' prefix caches, and replays the
// same multi-turn chat trace: sessions sharing a few system prompts, each turn sending the
// whole conversation so far (the previous answer and a new user message appended). It
// reports per policy the engines' own prefix-cache hit ratio (the delta of
// vllm:prefix_cache_hits_total over vllm:prefix_cache_queries_total, both engines summed),
// TTFT of the streamed answers, and how often the gateway's predicted cached prefix
// (x-router-predicted-cached-tokens) agreed with the engine's
// usage.prompt_tokens_details.cached_tokens (Agree says exactly how).
//
// Every run is bounded: the trace is fixed in size, every request has a timeout, all
// traffic stays on 127.0.0.1 (the engines connect to the gateway's event sockets there).
//
// # Concurrency and lifecycle
//
// Run owns every child process (the engines, one gateway at a time) and stops them before
// returning; the engines run in process groups of their own, so their engine-core children
// go with them. A policy's sessions run as concurrent goroutines that Run waits for; each
// session's turns run one after another.
package vllmprefix
