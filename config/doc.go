// Package config loads and validates the gateway's configuration.
//
// # Purpose
//
// [Config] composes one section per part: server (HTTP limits and
// timeouts), classifier, cache (the result cache), cascade (the classifier's static first
// stage and its band), batcher, decision (fast or slow, the slow-path and slow-share
// budgets), routing (the classification budget, the fallback and model names), pools (fast
// and slow: upstream pool, replica policy and admission), sim (the built-in simulated pools,
// started only with --simulate or sim.enabled), fleet (shared state on Redis), admin, auth
// (client API keys) and log. Each section's type, defaults and Validate belong to the
// package that owns the part; this package only composes them, roots their error messages
// at the section's path and adds the sections that belong to no other package.
//
// [Load] builds a Config from, in increasing precedence: [DefaultConfig]; one YAML file
// (gopkg.in/yaml.v3 with KnownFields, so an unknown key stops startup naming the key and its
// line; the replica policy's section, policy.Config, decodes itself just as strictly);
// environment variables TRIAGE_<PATH> for every scalar setting, named from the yaml tags by
// reflection (decision.alpha → TRIAGE_DECISION_ALPHA; an unknown TRIAGE_ variable or an
// unparsable value is an error naming the variable), including the settings a type keeps in
// sections of their own rather than in struct fields, as policy.Config keeps one per replica
// policy (see sectioned in env.go); the --listen and --simulate flags. Then every section is
// validated and all problems are reported at once, joined, each prefixed by its path
// ("decision.alpha: must be >= 0, got -1"). Nothing is ever clamped or defaulted silently.
//
// Durations are Go duration strings ("50ms"). Sections typed with time.Duration (server,
// cache, batcher, sim, the replica policies) decode through yaml.v3's native support or the
// policy section's own decoder, both of which accept only strings; the other upstream
// sections use upstream.Duration, a TextUnmarshaler. Because yaml.v3 reports a failing
// UnmarshalText without position, Load first walks the YAML node tree alongside the Go types
// and checks those values itself, so the message names line and path.
//
// example.yaml (embedded as [Example]) documents every setting with its default; tests keep
// it loading to exactly DefaultConfig and naming every key, so it cannot drift. [EnvVars]
// lists every environment variable with its default (triage --help prints it).
// [Config.YAML] prints the effective configuration with secrets redacted.
//
// os.Getenv and os.Environ are read here and nowhere else in the gateway.
//
// # Concurrency
//
// Load and the helpers are pure functions of their inputs (plus the process environment
// when Sources.Environ is nil, and the file); a Config is a plain value, safe to copy and to
// read from many goroutines once loaded.
//
// # Lifecycle
//
// Load once at startup, before building anything; there is no reloading of configuration
// (the classifier model reloads on its own, see package server).
package config
