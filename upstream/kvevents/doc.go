// Package kvevents follows what each replica's engine says it caches: vLLM's
// KV-cache events (BlockStored, BlockRemoved, AllBlocksCleared), received
// over ZeroMQ, kept per replica as an index of the token blocks it holds.
//
// # Purpose
//
// The prefix-aware replica policies ask "how many leading blocks of this
// request does replica r hold?". Without events the answer is a guess from
// what the gateway sent. With them it is what the engine reported, under
// keys the gateway computes itself from token ids (AppendKeys: each block's
// key chains its predecessor's key and its own tokens, seeded by the LoRA
// adapter), so the engine's hash algorithm and seed never need to match:
// a BlockStored maps each engine block hash to our key, finding the first
// block's parent key through parent_block_hash; BlockRemoved forgets engine
// hashes; AllBlocksCleared forgets everything. A request's keys come from
// its token ids as the engine tokenizes them (package upstream asks the
// engine's /tokenize).
//
// # Wire format
//
// vLLM publishes on a ZMQ PUB socket messages of three frames: topic, a
// sequence number (uint64, big-endian, from 0 per engine), and a msgpack
// payload, the batch [ts, events, data_parallel_rank]. Events are maps with
// a "type" key (vLLM 0.32) or, in older versions, arrays tagged by their
// type name first; both are decoded, unknown map keys and trailing array
// elements are ignored, and a block hash may be an integer or bytes. The
// subscriber speaks ZMTP 3.0 itself (zmtp.go), in connect mode (the engine
// binds tcp://*:5557) or bind mode (the engine connects to the gateway).
// Only GPU blocks of KV-cache group 0 are indexed.
//
// # What can go wrong, and what is done
//
//   - Sequence gap (batches lost: the publisher's high-water mark, a
//     reconnect, an undecodable or oversized batch): with a replay endpoint
//     (vLLM's ROUTER), the missed batches are fetched and applied in order
//     before the one after the gap (this side a DEALER asking [empty,
//     start], the engine answering [empty, seq, payload]…, then seq −1), within
//     2s. What is still missing is counted and the index kept. Clearing
//     would forget the hot prefixes, which the engine does not announce
//     again until it evicts and recomputes them; keeping risks a few stale
//     blocks, which cost a cache miss and are forgotten at max_blocks
//     (oldest first) or repaired by later events.
//   - Engine restart (sequence number went back): index cleared.
//   - Joining late: blocks stored before the gateway listened are unknown,
//     and so are their children (counted as orphans) until recomputed.
//   - Stream down or silent: Live turns false after StaleAfter and the
//     policies use their guess for that replica (counted as fallbacks).
//   - A pick's new blocks count as held for PendingTTL before their
//     BlockStored arrives (Expect), so a burst of one new prefix does not
//     spread across replicas while the first is still prefilling.
//
// Memory is bounded whatever a publisher sends: a frame's declared size is
// checked before anything is allocated (messages over MaxMessageBytes are
// read past), token_ids over MaxTokensPerEvent are skipped unread, each
// replica indexes at most MaxBlocks blocks and MaxPendingBlocks pending
// keys, bind mode takes at most 16 publisher connections, and nested
// msgpack is followed 32 levels deep at most. Everything dropped is
// counted in triage_upstream_kv_events_dropped_total.
//
// This package imports no other package of the gateway.
//
// # Concurrency
//
// A Subscriber's connection goroutines apply batches under the index's
// write lock (one batch at a time, in order); Leading, Live, Expect and the
// other readers may be called from any goroutine and take its read lock or
// atomics. No lock is held across I/O.
//
// # Lifecycle
//
// NewSubscriber validates its config and starts nothing. Run dials (with
// backoff from 100ms to 5s) or listens until its context ends, owns every
// goroutine it starts and waits for them before returning. A Subscriber
// whose Run is not running is never Live, so requests are never blocked by
// a stream that is down.
package kvevents
