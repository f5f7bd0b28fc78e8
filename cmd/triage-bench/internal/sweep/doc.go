// Package sweep is "triage-bench policies": it replays a seeded multi-turn chat trace
// against simulated replicas in this process, once per replica policy (and per scenario:
// heterogeneous, degrading, tenants), and reports TTFT, E2E, SLO attainment, prefix-cache hit
// rate, per-replica load and Jain's index. Its trace replay (Prepare, Replay) and the
// simulator preset are shared with the fleet drills.
//
// A sweep runs one policy at a time; Replay owns one goroutine per request in flight and
// returns after all of them.
package sweep
