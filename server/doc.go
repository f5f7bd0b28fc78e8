// Package server is Triage's HTTP layer. It is the only package that uses fiber.
//
// # Purpose
//
// A [Server] answers the gateway's HTTP API (docs/http-api.md): POST /v1/query-process,
// POST /v1/classify (tooling, no execution), the OpenAI-compatible POST /v1/chat/completions,
// POST /v1/completions and GET /v1/models, the agent APIs POST /v1/messages (Anthropic,
// with count_tokens; messages.go) and POST /v1/responses with GET and DELETE by id (OpenAI
// Responses; responses.go), GET /healthz (and /health), /readyz and /metrics, and, only when
// admin.token is set, the admin endpoints.
//
// Every routed request takes the same path:
//
//  1. decode and validate (size, UTF-8, JSON, fields: decode.go; forwarded header values:
//     proxy.go); bad input is a 4xx;
//  2. build the classifier input with router.Input;
//  3. ask the router (package router) for a route: cache, batcher, classifier, decision under
//     the slow slots, the chosen pool — or, when an OpenAI request names a model one
//     pool serves, that pool unclassified (router.Target, router.Pin);
//  4. execute on the chosen pool (upstream.Pool.Do) and answer with the decision headers. A
//     slow request holds its slow slot until its upstream response has ended: for
//     query-process until the execution has been read to its end, for a proxied request
//     until the streamed body is closed.
//
// Errors become HTTP answers in exactly one place, errorResponse, in the OpenAI error shape;
// the Messages endpoints rewrite that answer into Anthropic's shape (errorshape.go).
//
// A Messages request for a pool whose replicas do not speak that API is translated to a chat
// completion and back (package translate). A Responses request continuing a stored response
// goes to the replica that stored it (affinity.go: a bounded table of ids, shared through the
// fleet's Redis in fleet mode), because the replica keeps that state in its own memory.
//
// # Concurrency
//
// Handlers run on fasthttp's connection goroutines; fiber reuses request memory after a
// handler returns, so anything kept longer (upstream body, session id, headers) is copied.
// The router and the pools are safe for concurrent use and own their state; so is the
// Responses table, whose one lock is never held across a call out.
//
// A streamed answer is handed to fasthttp as a body stream of unknown size: fasthttp writes
// it chunked, flushing after every read from the replica, and closes it exactly once —
// when the answer is complete, when a write fails because the client left, or when the
// response is reset. Closing it closes the upstream body (cancelling the upstream request if
// unfinished), releases the slow slot and ends the request's accounting. A client that
// disconnects is noticed at the next chunk written to it.
//
// Before that, while a handler waits on a replica, fasthttp does not read the client's
// connection: one goroutine of the server, the goneWatcher, peeks at the sockets of the
// requests waiting upstream every 250 ms and cancels those whose client closed or reset its
// connection (gone.go), so the replica stops generating for nobody.
//
// fiber's request context never cancels, so each request gets its own context from the
// server's base context, bounded by server.request_timeout (lifted for a stream once its
// headers are out, when the pool's stream-idle timeout takes over).
//
// # Lifecycle
//
// [New] validates the server's own [Config] (the server, admin and auth sections) and builds
// the routes over a router that the caller built; nothing runs. The server does not import
// the config package: cmd/triage hands it its sections and the parts it serves (the router
// and, through it, the pools; the fleet's Responses table). [Server.Run] serves until its
// context ends, then drains: readiness drops, the listener closes, in-flight requests
// (streams included) get server.shutdown_timeout to finish and are then cut through the base
// context; the client-gone watcher stops last. [Server.RunKeys] re-reads the API keys file.
// Run owns every goroutine it starts and returns after all of them; it neither runs nor stops
// the router, the pools or the simulators: cmd/triage's lifecycle starts them before the
// server and stops them after Run has drained.
package server
