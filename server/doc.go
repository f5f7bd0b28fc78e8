// Package server is Triage's HTTP layer and the request path behind it. It is the only
// package that uses fiber.
//
// # Purpose
//
// A [Server] answers the gateway's HTTP API (docs/http-api.md): POST /v1/query-process (the
// seed's contract), POST /v1/classify (tooling, no execution), the OpenAI-compatible
// POST /v1/chat/completions, POST /v1/completions and GET /v1/models, GET /healthz,
// /readyz and /metrics, and, only when admin.token is set, the admin endpoints.
//
// Every routed request takes the same path:
//
//  1. decode and validate (size, UTF-8, JSON, fields: decode.go); bad input is a 4xx;
//  2. build the classifier input, normalise(FormatInput(instruction, context)), where
//     normalise trims and collapses whitespace (cache.go);
//  3. look up model version + text in the result cache (ristretto). A hit is the model's
//     output only, P(slow) and tokens, never a decision;
//  4. on a miss, submit the text to the batcher, which runs the current model on batches;
//     the result is cached under the version that produced it (Set may drop it);
//  5. decide with the decision.Policy under the current load (slow-path semaphore, batcher
//     queue). A slow verdict needs a healthy slow pool (else slow_unhealthy) and a slot of
//     the semaphore (else slow_saturated); either sheds the request to the fast pool;
//  6. execute on the chosen pool (upstream.Pool.Do) and answer with the decision headers.
//     A slow request holds its slot until its upstream response has ended: for
//     query-process until the execution has been read to its end, for a proxied request
//     until the streamed body is closed.
//
// Errors become HTTP answers in exactly one place, errorResponse, in the OpenAI error shape.
//
// # Concurrency
//
// Handlers run on fasthttp's connection goroutines; fiber reuses request memory after a
// handler returns, so anything kept longer (upstream body, session id, headers) is copied.
// Shared state is owned by the parts that are safe for concurrent use: the batcher (one
// dispatcher goroutine), the semaphore (atomic), the pools, the ristretto cache, and the
// model holder, whose mutex guards only the pointer swap and reference count — no model call
// happens under it. Each batch takes a reference to the current model for its Classify call;
// a reload swaps the pointer, and the old model is closed by whichever release drops its
// count to zero, so in-flight batches finish on the model they started with. Reloads are
// serialised by their own mutex.
//
// A streamed answer is handed to fasthttp as a body stream of unknown size: fasthttp writes
// it chunked, flushing after every read from the replica, and closes it exactly once —
// when the answer is complete, when a write fails because the client left, or when the
// response is reset. Closing it closes the upstream body (cancelling the upstream request if
// unfinished), releases the slow slot and ends the request's accounting. A client that
// disconnects is noticed at the next chunk written to it.
//
// fiber's request context never cancels, so each request gets its own context from the
// server's base context, bounded by server.request_timeout (lifted for a stream once its
// headers are out, when the pool's stream-idle timeout takes over).
//
// # Lifecycle
//
// [New] validates the configuration, builds the policy, semaphore, batcher, pools, cache and
// metrics, and loads and probes the model (a model that cannot classify a probe text is
// refused); nothing runs. [ListenBuiltin] opens the built-in simulators' listeners when no
// pool is configured. [Server.Run] starts the backends, then the batcher and the pools, then
// serves; when its context ends it shuts down in order: readiness drops, the listener
// closes, in-flight requests (streams included) get server.shutdown_timeout to finish and
// are then cut through the base context; the batcher and the pools stop; the model is
// closed once its last batch has released it; the backends stop last, so requests drained
// above could still reach them. Run owns every goroutine it starts and returns after all of
// them. [Server.Reload] may be called at any time while running (admin endpoint, SIGHUP).
package server
