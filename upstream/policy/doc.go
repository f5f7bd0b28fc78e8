// Package policy holds the replica policies: given one request and the
// replicas of a pool that may take it, a policy picks one.
//
// # Purpose
//
// A policy is a [Picker]: it sees a [Request] (prompt, token estimate, user,
// session) and one [Candidate] per replica (router-local in-flight count,
// scraped queue depth and KV-cache use) and returns the index of the replica
// to send the request to. Pickers that learn from finished requests also
// implement [Finisher]. Fifteen policies are provided (seventeen names with
// the aliases least-gpu-cache and slo): least-request, round-robin and random
// (baselines); prefix-cache and vtc-basic, and the signal policies
// least-kv-cache (alias least-gpu-cache), least-utilization, least-busy-time,
// throughput and least-latency (from AIBrix's routing algorithms);
// prefix-cache-preble (the global scheduler of the Preble paper); weighted
// (the scorer mix of the BLIS cluster simulator and llm-d's endpoint picker)
// and lmetric (from the agentic KV-cache policy study, its B3 policies); and
// AIBrix's SLO family, slo-least-load (also named slo) and slo-pack-load,
// which pick among the replicas predicted to meet the request's TTFT target
// (Request.TTFTTarget) from a TTFT-against-load line the policy fits to the
// gateway's own measurements, reported by the pool through [TTFTObserver].
// docs/sources.md names each source. [New] builds the one a [Config] names;
// [Names] lists them.
//
// The signal policies rank replicas by one reading each, lowest first, and
// share one rule (pickLowest): ties go to the fewest in-flight requests,
// then round-robin; when any candidate has no usable reading (its scrape is
// stale, or the replica has not been measured yet), the pick is
// least-request. All but least-busy-time read what the pool scrapes from
// the replicas' vLLM /metrics; least-busy-time measures busy time from the
// gateway's own picks.
//
// Each policy registers itself from its file's init function: its name,
// the YAML key of its own settings and their type, defaults and validation,
// and a build function. A [Config] holds the name, the tracing settings and
// one section per registered policy under its key (prefix_cache, lmetric,
// weighted, vtc, random, least_utilization, least_busy_time, throughput,
// least_latency, preble, and slo, which the SLO family's names share);
// every section is validated whichever policy is selected, and
// [Config.UnmarshalYAML] decodes each into its own type, refusing unknown
// keys at any depth.
//
// The prefix-aware policies (prefix-cache, prefix-cache-preble, lmetric,
// weighted) keep a router-side index of which prompt blocks each replica
// was sent: a guess, lossy by design (bounded per replica, least recently
// sent blocks dropped). Where the pool knows better — a replica whose
// engine publishes KV-cache events — it sets Request.Cache, a [CacheView]
// that says how much of the prompt that replica really holds, and the
// policies use it for that replica instead of the guess. They keep
// recording the guess all the same, so it is ready when a replica's events
// stop.
//
// In fleet mode several gateways each run their own copy of a pool's policy. The stateful
// prefix-aware policies also implement [Sharer]: after a pick, Share describes it as an
// [Observation] (block hashes, block size, session hash, replica ID — never prompt text),
// which the other gateways apply with Observe, so a conversation whose turns arrive at
// different gateways still reaches the replica that holds its prefix. The load the policies
// see is fleet-wide too: the pool adds the other gateways' in-flight counts to each
// [Candidate].
//
// A [Tracer], attached when Config.Trace.Enabled, records each decision's
// best-scored candidates and the score given up by the choice.
//
// This package is a leaf: it imports no other package of the gateway. The
// pool (package upstream) builds the Candidates and calls the Picker.
//
// # Concurrency
//
// Pick, Done, Share and Observe may be called from any number of goroutines. Stateful
// policies guard their state with one mutex each, held for the length of a
// decision and never across I/O; the baselines and the signal policies that
// read scraped values are lock-free. A Tracer is safe for concurrent use.
//
// # Lifecycle
//
// A Picker is built once per pool and lives as long as the pool; it starts
// no goroutines and holds no resources beyond memory, so there is nothing to
// close. Its state (prefix indexes, session bindings, fairness windows)
// starts empty and is bounded by its config. The registry is filled by the
// init functions and only read afterwards.
//
// # Adding a replica policy
//
// Write one file, <name>.go, holding the policy's type with its interface
// guard (var _ Picker = (*MyPolicy)(nil)), its config type if it has
// settings (a struct with yaml tags, a Default<Name>Config function and a
// ValidateAt(path string) error method that reports every invalid field
// from path), its constructor, and an init function calling
//
//	register("my-policy", "my_policy", DefaultMyPolicyConfig,
//		func(c MyPolicyConfig, env Env) (Picker, error) { return picker(NewMyPolicy(c, env.Now)) })
//
// (key "" and defaults nil for a policy without settings, which then takes
// noSettings). A config type holding a map or a slice also implements
// clone, so that copies of a Config share nothing. Then write
// <name>_test.go beside it, add the section to config/example.yaml (a test
// requires every setting there) and the policy to docs/configuration.md.
// Nothing else changes: the name is accepted in config files, the section
// is decoded, validated and printed, and its scalar fields get TRIAGE_
// environment variables and appear in triage --help.
package policy
