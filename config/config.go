package config

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/triage-gw/triage/batcher"
	"github.com/triage-gw/triage/classifier"
	"github.com/triage-gw/triage/decision"
	"github.com/triage-gw/triage/fleet"
	"github.com/triage-gw/triage/router"
	"github.com/triage-gw/triage/server"
	"github.com/triage-gw/triage/sim"
	"github.com/triage-gw/triage/upstream"
)

// Config is the whole gateway configuration. Every section owns its defaults and its
// validation; Config only composes them, giving each section its path.
//
// Durations are Go duration strings ("50ms", "1m30s") everywhere. The sections of this
// package, those of batcher and sim and the replica policies' use time.Duration, which
// gopkg.in/yaml.v3 decodes from such strings and encodes back with String(); the other
// upstream sections use upstream.Duration, a TextUnmarshaler with the same spelling. A bare
// number is rejected in both, never guessed.
type Config struct {
	Server     server.HTTPConfig    `yaml:"server"`
	Classifier classifier.Config    `yaml:"classifier"`
	Cache      router.CacheConfig   `yaml:"cache"`
	Cascade    router.CascadeConfig `yaml:"cascade"`
	Batcher    batcher.Config       `yaml:"batcher"`
	Decision   decision.Config      `yaml:"decision"`
	Routing    router.RoutingConfig `yaml:"routing"`
	Pools      PoolsConfig          `yaml:"pools"`
	Sim        SimConfig            `yaml:"sim"`
	Fleet      fleet.Config         `yaml:"fleet"`
	Admin      server.AdminConfig   `yaml:"admin"`
	Auth       server.AuthConfig    `yaml:"auth"`
	Log        LogConfig            `yaml:"log"`
}

// PoolsConfig holds the fast and the slow pool. Both must list replicas unless sim.enabled
// (or --simulate) asks for the built-in simulated pools, which then take their place (every
// other pool setting still applies). There is no implicit fallback to the simulators: a
// config whose replicas went missing (an unset variable, a lost mount) must stop the
// gateway, not answer with made-up text.
type PoolsConfig struct {
	Fast upstream.PoolConfig `yaml:"fast"`
	Slow upstream.PoolConfig `yaml:"slow"`
}

// Empty reports whether neither pool lists a replica.
func (c PoolsConfig) Empty() bool {
	return len(c.Fast.Replicas) == 0 && len(c.Slow.Replicas) == 0
}

// DefaultPoolConfig returns a pool called name with every upstream default and no replicas.
func DefaultPoolConfig(name string) upstream.PoolConfig {
	pc := upstream.DefaultPoolConfig()
	pc.Name = name
	return pc
}

// placeholderReplica stands in for the built-in replicas while validating, so the rest of a
// pool's settings are checked before the simulators exist.
var placeholderReplica = upstream.ReplicaConfig{URL: "http://127.0.0.1:1", ID: "builtin"}

// validatePool checks the pool at path ("pools.fast"). With builtin set, its empty replica
// list is expected and the other fields are checked against a placeholder replica.
func validatePool(pc upstream.PoolConfig, path string, builtin bool) error {
	if builtin {
		pc.Replicas = []upstream.ReplicaConfig{placeholderReplica}
	}
	return pc.ValidateAt(path)
}

// ValidateAt reports every invalid field of both pools, named from path ("pools").
// simulated says the built-in simulated pools were asked for (sim.enabled): then empty
// replica lists are expected, as the simulators fill them in before the pools are built.
func (c PoolsConfig) ValidateAt(path string, simulated bool) error {
	builtin := simulated && c.Empty()
	var errs []error
	if !builtin {
		for _, p := range []struct {
			name string
			pc   upstream.PoolConfig
		}{{"fast", c.Fast}, {"slow", c.Slow}} {
			if len(p.pc.Replicas) == 0 {
				errs = append(errs, fmt.Errorf("%s.%s.replicas: pool %q has no replica: list at least one "+
					"(the built-in simulated pools start only with --simulate or sim.enabled: true)", path, p.name, p.pc.Name))
			}
		}
	}
	errs = append(errs,
		validatePool(c.Fast, path+".fast", builtin || len(c.Fast.Replicas) == 0),
		validatePool(c.Slow, path+".slow", builtin || len(c.Slow.Replicas) == 0),
	)
	if c.Fast.Name == c.Slow.Name && strings.TrimSpace(c.Fast.Name) != "" {
		errs = append(errs, fmt.Errorf("%s.slow.name: must differ from %[1]s.fast.name, both are %q", path, c.Slow.Name))
	}
	return errors.Join(errs...)
}

// SimConfig describes the built-in simulated pools, started only when Enabled (sim.enabled,
// or the --simulate flag) and then in place of any configured replica: FastReplicas servers of the Fast replica config and SlowReplicas of the Slow one, each on
// its own 127.0.0.1:0 listener. Replica i is named "<name>-<i>" and seeded with Seed+i.
type SimConfig struct {
	// Enabled starts the built-in simulated pools: every answer is made up by the simulator
	// (and carries the X-Simulated header). Default false; the pools must then list real
	// replicas. Set it (or pass --simulate) for demos and tests only; it cannot be combined
	// with configured replicas.
	Enabled bool `yaml:"enabled"`
	// FastReplicas is the number of simulated fast replicas, in [1, 16]. Default 2.
	FastReplicas int `yaml:"fast_replicas"`
	// SlowReplicas is the number of simulated slow replicas, in [1, 16]. Default 2.
	SlowReplicas int `yaml:"slow_replicas"`
	// FastPrefillReplicas of the FastReplicas are prefill replicas and the others decode
	// replicas, so the fast pool runs disaggregated (upstream.DisaggregationConfig); 0 (the
	// default): no KV hand-off. Below FastReplicas.
	FastPrefillReplicas int `yaml:"fast_prefill_replicas"`
	// SlowPrefillReplicas is FastPrefillReplicas for the slow pool.
	SlowPrefillReplicas int `yaml:"slow_prefill_replicas"`
	// Fast is the fast replicas' simulator config. Default sim.FastPreset().
	Fast sim.Config `yaml:"fast"`
	// Slow is the slow replicas' simulator config. Default sim.SlowPreset() (1–3 s for a
	// 50-token answer).
	Slow sim.Config `yaml:"slow"`
}

// DefaultSimConfig returns two fast and two slow replicas with the simulator's presets.
func DefaultSimConfig() SimConfig {
	return SimConfig{FastReplicas: 2, SlowReplicas: 2, Fast: sim.FastPreset(), Slow: sim.SlowPreset()}
}

// ValidateAt reports every invalid field, each error naming it from path ("sim").
func (c SimConfig) ValidateAt(path string) error {
	var errs []error
	if c.FastReplicas < 1 || c.FastReplicas > 16 {
		errs = append(errs, fmt.Errorf("%s.fast_replicas: must be in [1, 16], got %d", path, c.FastReplicas))
	}
	if c.SlowReplicas < 1 || c.SlowReplicas > 16 {
		errs = append(errs, fmt.Errorf("%s.slow_replicas: must be in [1, 16], got %d", path, c.SlowReplicas))
	}
	if c.FastPrefillReplicas < 0 || c.FastPrefillReplicas >= max(c.FastReplicas, 1) {
		errs = append(errs, fmt.Errorf("%s.fast_prefill_replicas: must be in [0, fast_replicas (%d)), got %d: a disaggregated pool needs a decode replica",
			path, c.FastReplicas, c.FastPrefillReplicas))
	}
	if c.SlowPrefillReplicas < 0 || c.SlowPrefillReplicas >= max(c.SlowReplicas, 1) {
		errs = append(errs, fmt.Errorf("%s.slow_prefill_replicas: must be in [0, slow_replicas (%d)), got %d: a disaggregated pool needs a decode replica",
			path, c.SlowReplicas, c.SlowPrefillReplicas))
	}
	errs = append(errs, c.Fast.ValidateAt(path+".fast"), c.Slow.ValidateAt(path+".slow"))
	return errors.Join(errs...)
}

// LogConfig selects the log level and format.
type LogConfig struct {
	// Level is debug, info, warn or error. Default info.
	Level string `yaml:"level"`
	// Format is json or text. Default json.
	Format string `yaml:"format"`
}

// DefaultLogConfig returns JSON logs at info level.
func DefaultLogConfig() LogConfig { return LogConfig{Level: "info", Format: "json"} }

// ValidateAt reports an unknown level or format, named from path ("log").
func (c LogConfig) ValidateAt(path string) error {
	var errs []error
	switch c.Level {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("%s.level: must be debug, info, warn or error, got %q", path, c.Level))
	}
	switch c.Format {
	case "json", "text":
	default:
		errs = append(errs, fmt.Errorf("%s.format: must be json or text, got %q", path, c.Format))
	}
	return errors.Join(errs...)
}

// DefaultConfig returns every section's defaults: no replicas (so it does not validate
// until the pools list some, or sim.enabled asks for the built-in simulated pools), the
// quadratic decision policy, batches of 32 within 50ms, no admin endpoints.
func DefaultConfig() Config {
	return Config{
		Server:     server.DefaultHTTPConfig(),
		Classifier: classifier.DefaultConfig(),
		Cache:      router.DefaultCacheConfig(),
		Cascade:    router.DefaultCascadeConfig(),
		Batcher:    batcher.DefaultConfig(),
		Decision:   decision.DefaultConfig(),
		Routing:    router.DefaultRoutingConfig(),
		Pools:      PoolsConfig{Fast: DefaultPoolConfig("fast"), Slow: DefaultPoolConfig("slow")},
		Sim:        DefaultSimConfig(),
		Fleet:      fleet.DefaultConfig(),
		Admin:      server.AdminConfig{},
		Auth:       server.DefaultAuthConfig(),
		Log:        DefaultLogConfig(),
	}
}

// Validate checks every section and returns all problems at once, joined, each naming its
// field by its full path ("decision.alpha: must be >= 0, got -1"): every section's ValidateAt
// is given its path, so no message is rewritten after the fact.
func (c Config) Validate() error {
	return errors.Join(
		c.Server.ValidateAt("server"),
		c.Classifier.ValidateAt("classifier"),
		c.Router().ValidateAt(""),
		c.Pools.ValidateAt("pools", c.Sim.Enabled),
		c.Sim.ValidateAt("sim"),
		c.Fleet.ValidateAt("fleet"),
		c.Admin.ValidateAt("admin"),
		c.Auth.ValidateAt("auth"),
		c.Log.ValidateAt("log"),
		c.crossChecks(),
	)
}

// crossChecks reports combinations of settings from different sections that cannot work.
func (c Config) crossChecks() error {
	var errs []error
	for _, p := range []struct {
		path string
		pc   upstream.PoolConfig
	}{{"pools.fast", c.Pools.Fast}, {"pools.slow", c.Pools.Slow}} {
		if fb := p.pc.Timeouts.FirstByte.Std(); fb > 0 && c.Server.RequestTimeout > 0 && fb >= c.Server.RequestTimeout {
			errs = append(errs, fmt.Errorf("%s.timeouts.first_byte: must be below server.request_timeout (%s), got %s: "+
				"otherwise the request times out first and a replica that never answers is never ejected",
				p.path, c.Server.RequestTimeout, fb))
		}
	}
	for i, a := range c.Routing.ModelAliases {
		for _, p := range []struct {
			path string
			pc   upstream.PoolConfig
		}{{"pools.fast", c.Pools.Fast}, {"pools.slow", c.Pools.Slow}} {
			models := []string{p.pc.Model}
			for _, r := range p.pc.Replicas {
				models = append(models, r.Model)
			}
			if slices.Contains(models, a) {
				errs = append(errs, fmt.Errorf("routing.model_aliases[%d]: %q is also a model of %s: a name cannot both route and pin", i, a, p.path))
			}
		}
	}
	return errors.Join(errs...)
}

// HTTP returns the HTTP layer's sections (server, admin, auth) and whether the pools are the
// built-in simulators.
func (c Config) HTTP() server.Config {
	return server.Config{HTTP: c.Server, Admin: c.Admin, Auth: c.Auth, Simulated: c.Sim.Enabled}
}

// Router returns the request pipeline's sections (cache, cascade, batcher, decision, routing).
func (c Config) Router() router.Config {
	return router.Config{Cache: c.Cache, Cascade: c.Cascade, Batcher: c.Batcher, Decision: c.Decision, Routing: c.Routing}
}
