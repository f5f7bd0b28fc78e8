// Package fleet makes several gateway replicas act as one, on Redis (or Valkey): one
// slow slots for the whole fleet ([Slots]), a shared second tier of the result cache
// ([Cache]), replica affinity and fleet-wide replica load ([Affinity]), and the connection
// they go through ([Conn]). It is off by default; a single gateway needs none of it.
//
// # Purpose
//
// Behind a load balancer every gateway would otherwise have its own slow-path semaphore (the
// fleet admits N × the slots and each computes its load from its share) and its own result
// cache (a text classified by one is a miss on the others). With fleet mode,
// decision.max_slow_concurrency is the whole fleet's, the load the quadratic threshold sees
// is the fleet's, and a result classified anywhere is a hit everywhere. Likewise each
// gateway's replica policy would only know the prompts and sessions it routed itself and its
// own requests in flight: with affinity, every pick of a prefix-aware policy is applied by
// the other gateways too, and every candidate's load is the fleet's. See [Slots] for the
// slots' guarantees and staleness, [Cache] for the cache's keys and bounds, [Affinity] for
// what is shared and how stale it may be.
//
// # Failure
//
// Redis is a dependency of fleet mode, never of a request: a gateway that cannot reach it at
// startup serves in local mode (unless fleet.required), and one that loses it mid-run marks
// it down at the first failed ping or after a few failed commands (within a second with the
// defaults), makes no more Redis calls on the request path, keeps the grant of slots it had,
// treats the shared tier as empty, routes on its own prefix index and in-flight counts,
// and rejoins when a ping succeeds (affinity subscribes again). triage_fleet_up and a log
// line say which state it is in.
//
// # Concurrency
//
// Every exported method but [Affinity.Attach] (called before Run) is safe for concurrent
// use. [Slots.TryAcquire] and Release are one
// atomic compare-and-swap on the request path; a sync (Lua script) runs in the background
// every fleet.slots.sync_interval, and a top-up sync only when a gateway's grant is used up
// while the fleet has room. [Cache.Get] is one round trip for any number of texts; Set
// queues to a bounded channel drained by [Cache.Run]. [Affinity.PublishPick] queues to a
// bounded channel and [Affinity.RemoteInFlight] reads an immutable map; [Affinity.Run]
// owns the publisher, the load ticker, the subscriber and the goroutine that applies
// received messages.
//
// # Lifecycle
//
// [New] dials and builds the parts; [Fleet.Run] keeps them working until its context ends
// and then stops them in order: the slots give this gateway's grant back while the
// connection is still open, then the cache writer and affinity stop, then the connection
// closes. Pools are attached to [Affinity] after New and before Run. The gateway runs the
// fleet as a backend: started before it serves, stopped after its drain.
package fleet
