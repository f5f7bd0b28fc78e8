// Package decision sorts a classified request onto the fast or the slow path.
//
// # Purpose
//
// The classifier says how likely a prompt needs the slow (large, expensive) pool: P(slow) in
// [0, 1]. The model's own label is slow iff P(slow) > its cutoff, the label_threshold of the
// model's manifest (0.5 for the shipped model), which comes with every [Score]: there is no
// second copy of the boundary here. A [Policy] turns the score and the gateway's current load
// ([State]) into a [Decision]. Two policies exist so they can be compared on the same traffic
// (the original Triage design tried both, in this order; see docs/sources.md):
//
//   - [Quadratic] (the design's second version, the default): load = SlowActive/SlowMax in
//     [0, 1]; threshold = Base + Alpha·load²; slow iff P(slow) > threshold. With the defaults (Base 0.5,
//     Alpha 0.45) the threshold is 0.50 when idle, 0.6125 at half load and 0.95 at full load, so a
//     saturated slow pool only takes prompts the model is nearly sure about. Base+Alpha must not
//     exceed 1: above 1 nothing could ever go slow at full load, which is a dead configuration
//     rather than a policy.
//   - [GreyZone] (the design's first version): outside the grey zone [GreyLow, GreyHigh] (default
//     [0.45, 0.55], both ends inclusive) the model's label decides; inside it the batcher's queue
//     length overrides: more than HighQueue (10) waiting → fast, fewer than LowQueue (3) → slow,
//     otherwise the model's label. It ignores the slow pool's occupancy; the reported threshold is
//     always the model's cutoff.
//
// The original design also defines a "high-confidence margin" of 0.3 but its decision never
// reads it; this package deliberately gives it no meaning. The "only P(slow) > 0.95 goes slow at full load"
// property comes from Base+Alpha, not from a margin.
//
// A NaN probability compares false with every threshold, so it always decides fast.
//
// # The slow-share cap
//
// With decision.max_slow_share set, a [ShareCap] caps the share of routed requests that go
// slow over a sliding window (decision.share_window): it keeps the window's P(slow) histogram
// and hands the policy a floor, the (1 − max_slow_share) quantile of those scores, in
// [State].ShareFloor. Slow needs P(slow) above both the policy's own threshold and the
// floor: the stricter rule wins, and the [Decision] reports both parts (LoadThreshold,
// ShareFloor) beside their maximum (Threshold). The floor follows the scores, not the
// decisions, so it does not oscillate; after a change in the traffic mix the share reaches
// the cap within one window (BenchmarkShareCapStep). With decision.share_unit tokens the
// share and the quantile are weighted by each request's tokens, observed when the request
// completes; a request whose tokens never arrive weighs the window's mean.
//
// # Reasons
//
// Every decision carries one [Reason]; the gateway writes it into x-router-reason and a
// metric label, so the set is small and fixed:
//
//   - slow_granted: P(slow) > threshold (quadratic), or the model's label is slow outside the
//     grey zone or in its middle band (grey-zone). The caller must still win the slow-path
//     [Semaphore].
//   - fast_model: the model's label is fast (P(slow) ≤ cutoff) and the threshold did not let it
//     through either.
//   - load_shedding: the model's label is slow (P(slow) > cutoff) but the load-raised threshold
//     is at or above P(slow). With Base above the cutoff this also covers P(slow) in
//     (cutoff, Base] at zero load, because the threshold then never drops to the cutoff.
//   - budget_shedding: the policy's own rule said slow, but P(slow) is at or below the slow-share
//     cap's floor ([State].ShareFloor, from a [ShareCap]).
//   - grey_zone_fast: grey-zone policy, P(slow) inside the zone and the queue is long.
//   - grey_zone_slow: grey-zone policy, P(slow) inside the zone and the queue is short.
//   - slow_saturated: set by the request pipeline (package router), not by a Policy — the policy said slow but
//     [Semaphore.TryAcquire] failed, so the request was shed to fast instead of queued.
//   - slow_unhealthy: set by the request pipeline — the policy said slow but the slow pool has no
//     healthy replica.
//
// Four more are set by the request pipeline when no policy decided at all: pinned (the
// request named a model one pool serves), and classifier_timeout, classifier_busy and
// classifier_unavailable (the classification did not come within the request's budget, the
// classifier's queue was full, or it failed; the configured fallback pool took the request).
// A fallback to slow still needs a slot, else slow_saturated.
//
// # Concurrency
//
// [ShareCap] holds one mutex, taken once per Observe and per Threshold. Policies are
// immutable after construction: Decide is a pure function of its arguments, safe
// for any number of goroutines, and does not allocate. [Semaphore] is lock-free (one atomic
// counter updated by compare-and-swap) and safe for concurrent use. Decide reads no shared state
// itself: the caller snapshots the semaphore and queue into a [State], so the load a decision saw
// is exactly the load it reports.
//
// # Lifecycle
//
// Build the policy once at startup with [NewPolicy] from a validated [Config] and the semaphore
// with [NewSemaphore](cfg.MaxSlowConcurrency). A request that decides slow calls TryAcquire; on
// success it holds the slot until its upstream response has fully ended (streaming included) and
// then calls Release exactly once. On failure it goes fast with reason slow_saturated — the slow
// path never queues (the original Python prototype's asyncio.Semaphore waited; we shed instead). Nothing here owns a
// goroutine or needs closing. Metrics are the request pipeline's job.
package decision
