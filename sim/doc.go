// Package sim is an OpenAI- and Anthropic-compatible simulated LLM server: mockllm.
//
// # Purpose
//
// It stands in for a vLLM replica wherever a real one is too heavy: the
// gateway's built-in fast and slow pools (several Servers on 127.0.0.1:0
// in one process), tests, benchmarks and the Docker demo. It serves
//
//	POST /v1/chat/completions, POST /v1/completions  (streaming or not)
//	POST /v1/messages, /v1/messages/count_tokens     (Anthropic, as vLLM serves it)
//	POST /v1/responses, GET and DELETE /v1/responses/{id}
//	GET  /v1/models, GET /health ("ok"), GET /metrics (vLLM metric names)
//
// with vLLM's shapes and usage fields, streamed as named events where the API does. A chat
// or Messages conversation that offers tools and ends with the user's message is answered
// with a call of the chosen (or first) tool, so clients can go round the tool loop. Responses are stored
// (store, the default) in a bounded per-replica map for previous_response_id and GET, and an
// id the replica does not hold is answered 404 in vLLM's words, as vLLM keeps them in one
// replica's memory only.
//
// and models what a router can observe of a real engine: a fixed number of
// batch slots with a bounded FIFO queue in front (429 with Retry-After when
// it is full), a time to first token that grows with the prompt tokens not
// in the prefix cache, a per-token decode time, a prefix KV cache (chained
// block hashes in an LRU, so a shared system prompt really makes the first
// token faster), and injected faults (500s, a stall before the first byte,
// streams cut before [DONE]). Config documents the latency formula. A
// replica with a Role plays its side of vLLM's prefill/decode KV hand-off
// (disagg.go): a prefill replica answers kv_transfer_params, a decode replica
// given fresh ones skips the prefill, stale ones give the wrong text.
//
// The answer is deterministic filler, so tests can assert it: see Token
// for the exact rule, CountTokens for token counting (ceil(bytes/4)) and
// RenderChat for how chat messages become the prompt. Every response names
// the replica in the x-mockllm-replica header.
//
// # Concurrency
//
// A Server is safe for concurrent use; each request runs on its net/http
// handler goroutine. Shared state is small and each piece has one lock:
// the scheduler (slots, queue, reserved KV blocks), the prefix-cache LRU,
// the stored responses, and the random source (one draw per request, so a seed and an arrival
// order fix every outcome). The runtime slowdown (SetSlowdown) is one
// atomic word read at each delay. Metrics read scheduler state at scrape time.
// A request holds its slot from the start of prefill to its last token;
// a client that disconnects frees it at once, because every simulated
// delay waits on the request's context.
//
// # Lifecycle
//
// New validates the Config and builds the Server; it starts no goroutine.
// Use it as an http.Handler, or call Serve(ctx, ln), which owns the one
// goroutine running http.Server.Serve, shuts down gracefully when ctx ends
// and waits for that goroutine before returning. Close makes the server
// refuse new work with 503 and cuts in-flight requests at their next
// delay; it does not wait for handler goroutines, which belong to whoever
// runs the http.Server.
package sim
