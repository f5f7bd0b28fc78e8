// Package batcher groups concurrent single-text requests into batches for one model call.
//
// # Purpose
//
// The classifier is much cheaper per text when it encodes many texts in one ONNX Runtime call,
// but a gateway receives texts one request at a time. A [Batcher] collects the texts of
// concurrent [Batcher.Submit] calls, hands them to a [Func] in batches of at most
// Config.MaxBatch, and gives each caller its own result (P(slow) for the classifier). Grouping
// texts by length inside a batch is the Func's business.
//
// The batcher is work-conserving: the window never makes a request wait while the model is
// idle. A batch is handed to a free worker when
//
//	(a) MaxBatch texts are waiting, or
//	(b) no batch is running at all — a lone request at an idle batcher runs at once, alone, or
//	(c) the oldest waiting text has waited MaxWait.
//
// While every worker is busy, arriving texts queue and form the next batch (up to MaxBatch; the
// rest wait for the batch after). Rule (c) can only fire with Workers > 1, when one batch is
// running and another worker is free: it bounds how long a second batch waits to fill. With
// Workers = 1 a free worker means nothing is running, so MaxWait never delays anything and
// batches are simply what arrived during the previous one. (The original Python prototype held every batch
// open for the full window; this keeps its batching under load without its idle-time latency.)
//
// Identical texts share one slot: a Submit whose text is already queued or running waits for
// that same result (counted in triage_batcher_dedup_total) and takes no queue space. The sharing
// ends when the result is delivered; a later Submit of the text starts a new slot (the cache in
// front of the batcher handles repeats over time).
//
// Lossy behaviour, where it happens:
//
//   - Submit returns [ErrQueueFull] at once when QueueSize distinct texts are waiting; nothing
//     waits for space. Joining an identical text in flight is always allowed.
//   - A Submit whose ctx ends returns ctx.Err() at once. If every caller of a queued text has
//     gone, the text is dropped before its batch runs and is never sent to Func. If its batch is
//     already running, the result is discarded.
//   - An error from Func goes to every caller in that batch, unwrapped. A panic in Func is
//     recovered, logged and delivered to every caller in the batch as an error wrapping
//     [ErrPanic]; the batcher keeps working. A Func that returns the wrong number of results
//     fails its whole batch.
//
// # Concurrency
//
// One dispatcher goroutine (inside [Batcher.Run]) owns all queue state: the FIFO of waiting
// texts, the map from text to its in-flight slot with that slot's callers, the number of running
// batches and the MaxWait timer. Nothing else reads or writes it; there is no mutex. Callers
// talk to it over one buffered channel carrying "new caller" and "caller gone" messages — one
// channel, so a caller's "gone" always arrives after its "new". Each caller gets its answer on
// its own reply channel of size 1, which the dispatcher sends on at most once, so the dispatcher
// never blocks on a caller. A caller that gives up also sets an atomic flag on its request, so
// the text is dropped when its batch is formed even if the "gone" message could not be sent
// without waiting (then it is skipped).
//
// Each batch runs Func on its own goroutine, at most Config.Workers at a time; the goroutine
// hands the finished batch back to the dispatcher on a channel with one slot per worker, and the
// dispatcher delivers the results. [Batcher.QueueLen] reads an atomic mirror of the queue length
// that the dispatcher updates after every event. Submit, SubmitTimed and QueueLen are safe for
// concurrent use; Func must be safe to call from Workers goroutines at once.
//
// # Lifecycle
//
// [New] validates the config and registers the metrics; nothing runs until [Batcher.Run], which
// may be called once. Submits made before Run wait for it (bounded by their ctx). Run serves
// until its ctx ends — that is how the batcher is closed; there is no Close method. Then it
// stops accepting (Submit returns [ErrClosed]), answers every queued and running caller with
// ErrClosed, waits for running Func calls to return (their ctx, Run's, is now cancelled, so a
// Func that honours ctx returns promptly) and returns nil. In the gateway's shutdown order the
// HTTP layer drains first, so normally nothing is left to fail. Run owns every goroutine the
// batcher starts and returns only after all of them have ended.
package batcher
