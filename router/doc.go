// Package router is the request pipeline behind every front end: it turns a request's text
// into a routing decision. It knows nothing of HTTP; the HTTP layer (package server) decodes
// requests, calls it and proxies to the pool it names, and another front end (an Envoy
// external-processing endpoint picker, an embedded library) could call it the same way.
//
// # Purpose
//
// For one text built by [Input] (instruction, or "instruction [SEP] context", whitespace
// normalised) a [Router]:
//
//  1. looks up model version + text in the result cache (ristretto). A hit is the model's
//     output only, P(slow) and tokens, never a decision; the version is the loaded model's,
//     so a reload never serves another model's results;
//  2. on a miss runs the cascade's first stage (its band narrowed when the batcher's queue
//     is long, CascadeConfig.NarrowFrom; such load-only decisions are not cached) and
//     submits the texts it leaves undecided to the batcher, which runs the current model on batches (identical texts in flight share
//     one slot); every result a batch computes is cached under the version that produced it
//     (the cache may drop it), whether or not anyone still waits for it;
//  3. decides with the decision.Policy under the current load (the slow slots and the
//     batcher's queue). The model's label boundary comes with every score from the model
//     that produced it (its manifest's label_threshold): nothing here has a second copy. A
//     slow verdict needs a healthy slow pool (else slow_unhealthy) and a slot of the
//     [SlowSlots] (else slow_saturated); either sheds the request to the fast pool;
//  4. returns the [Route]: the score, the verdict, the reason and the pool.
//
// [Router.Route] is for requests that will be executed: a slow route holds its slow slot
// until [Route.Release], which the caller makes when the upstream response has ended
// (streams included). [Router.Preview] decides the same way but holds nothing (the
// /v1/classify endpoint).
//
// The classifier never fails a routed request: Route waits for the encoder at most
// routing.classify_budget (a text that would not be done within it, counting the running
// batch, the texts queued ahead and its own inference, is not queued at all), and when the budget runs out, the queue is full or a batch fails, routing.fallback
// places the request (reasons classifier_timeout, classifier_busy, classifier_unavailable)
// or, with reject, returns the error. A queued text keeps its place in the batcher: its
// submission is carried by the router's lifetime, not the request's, so it is classified and
// cached for the next request with the same text. Preview has no budget: its answer is the
// classification.
//
// [Router.Target] reads a request's model name (routing.model_aliases route; a name exactly
// one pool serves pins; others follow routing.unknown_model) and [Router.Pin] places a pinned
// request without classifying it; a pinned slow request holds a slow-path slot like a routed
// one, and is refused with [ErrSlowSaturated] when none is free.
//
// Errors are the package's own ([ErrQueueFull], [ErrBudgetExceeded], [ErrSlowSaturated],
// [ErrClosed], [ErrNoModel], [*UnclassifiableError], [*ReloadError]); front ends map them to
// their answers.
//
// # Concurrency
//
// Every method is safe for concurrent use. Shared state is owned by parts that are: the
// batcher (one dispatcher goroutine), the slow slots (atomic for the local semaphore), the
// ristretto cache, and the model holder, whose mutex guards only the pointer swap and the
// reference count — no model call happens under it; the model version and cutoff that every
// request reads are an atomic load. Each batch takes a reference to the current model for
// its Classify call; a reload swaps the pointer, and the old model is closed by whichever
// release drops its count to zero, so in-flight batches finish on the model they started
// with. Reloads are serialised by their own mutex. A routed request with a budget submits its
// text from a goroutine the router owns (it waits for them in Close), so the request can stop
// waiting without taking the text out of the batcher.
//
// # Lifecycle
//
// [New] validates the configuration, builds the policy, slow slots, batcher, cache and metrics,
// and loads and probes the model (a model that cannot classify a probe text, or reports a
// label threshold outside (0, 1), is refused); nothing runs. [Router.Run] runs the batcher
// until its context ends, then closes the router: the model closes once its last batch has
// released it, and the cache stops. [Router.Close] does the same for a router that never
// ran. [Router.Reload] may be called at any time before that. The router does not run the
// pools it routes to; their owner does.
package router
