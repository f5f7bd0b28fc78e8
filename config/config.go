package config

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/triage-gw/triage/batcher"
	"github.com/triage-gw/triage/classifier"
	"github.com/triage-gw/triage/decision"
	"github.com/triage-gw/triage/fleet"
	"github.com/triage-gw/triage/router"
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
	Server     ServerConfig         `yaml:"server"`
	Classifier classifier.Config    `yaml:"classifier"`
	Cache      router.CacheConfig   `yaml:"cache"`
	Cascade    router.CascadeConfig `yaml:"cascade"`
	Batcher    batcher.Config       `yaml:"batcher"`
	Decision   decision.Config      `yaml:"decision"`
	Routing    router.RoutingConfig `yaml:"routing"`
	Pools      PoolsConfig          `yaml:"pools"`
	Sim        SimConfig            `yaml:"sim"`
	Fleet      fleet.Config         `yaml:"fleet"`
	Admin      AdminConfig          `yaml:"admin"`
	Auth       AuthConfig           `yaml:"auth"`
	Log        LogConfig            `yaml:"log"`
}

// ServerConfig is the HTTP layer: where it listens, what it accepts and how long things may take.
type ServerConfig struct {
	// Listen is the TCP address to serve on. Default "127.0.0.1:8080"; the --listen flag
	// overrides it.
	Listen string `yaml:"listen"`
	// BodyLimit is the largest request body in bytes; larger bodies get 413. Default 1 MiB.
	BodyLimit int `yaml:"body_limit"`
	// MaxTextBytes bounds the text handed to the classifier for one request (instruction and
	// context together, in bytes, after whitespace normalisation); longer texts get 400.
	// Default 64 KiB.
	MaxTextBytes int `yaml:"max_text_bytes"`
	// MaxBatchTexts is the most texts one POST /v1/classify may carry. Default 64.
	MaxBatchTexts int `yaml:"max_batch_texts"`
	// RequestTimeout bounds one request from arrival until its response has been produced:
	// classification, the upstream call and, for non-streaming answers, the upstream body.
	// A streaming answer is bounded by it until its headers arrive, then by the pool's
	// timeouts.stream_idle between chunks. Default 30s.
	RequestTimeout time.Duration `yaml:"request_timeout"`
	// ShutdownTimeout bounds the graceful drain: after it, requests still in flight are cut.
	// Default 15s.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	// ReadTimeout bounds reading one request (headers and body). Default 30s.
	ReadTimeout time.Duration `yaml:"read_timeout"`
	// WriteTimeout bounds writing one response, streams included; 0 disables it. Default 0,
	// because an SSE stream may legitimately run for minutes; streams are bounded by the pools'
	// stream_idle timeout instead.
	WriteTimeout time.Duration `yaml:"write_timeout"`
	// WriteStallTimeout bounds how long one write of a response to the client may block (its
	// buffers full because it stopped reading). Past it the response is cut, the upstream
	// request cancelled and a slow-path slot released; triage_client_write_stalls_total
	// counts it. It bounds each write, not the stream: a stream may run for minutes while
	// the client reads. 0 disables it. Default 20s.
	WriteStallTimeout time.Duration `yaml:"write_stall_timeout"`
	// IdleTimeout closes keep-alive connections idle this long. Default 2m.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// QueryProcessMaxTokens is max_tokens of the small chat completion that
	// POST /v1/query-process runs on the chosen pool. Default 16.
	QueryProcessMaxTokens int `yaml:"query_process_max_tokens"`
	// MaxConnections bounds the client connections open at once, idle keep-alive ones
	// included; one more is answered 503 too_many_connections and closed. Request bodies are
	// read as they arrive, so a connection holds 12–37 KiB (measured: stalled headers, a
	// stalled body) plus at most twice the body bytes it really sent, never the length it
	// declares; this bounds what clients can hold. Default 10000.
	MaxConnections int `yaml:"max_connections"`
	// MaxConnectionsPerIP bounds the connections open at once from one client address; one
	// more is answered 429 too_many_connections_per_ip and closed. 0 (the default) disables
	// it: behind a load balancer or ingress every client shares its address.
	MaxConnectionsPerIP int `yaml:"max_connections_per_ip"`
	// ResponseAffinityEntries bounds the table of OpenAI Responses ids and the replica that
	// stored each (previous_response_id and GET/DELETE by id go there); past it the least
	// recently used entry is forgotten and its conversation can no longer be continued
	// through this gateway. Default 100000 (about 20 MB).
	ResponseAffinityEntries int `yaml:"response_affinity_entries"`
	// ResponseAffinityTTL forgets a Responses id this long after it was last used. Default 24h.
	ResponseAffinityTTL time.Duration `yaml:"response_affinity_ttl"`
}

// DefaultServerConfig returns the server defaults documented on ServerConfig.
func DefaultServerConfig() ServerConfig {
	return ServerConfig{
		Listen:                  "127.0.0.1:8080",
		BodyLimit:               1 << 20,
		MaxTextBytes:            64 << 10,
		MaxBatchTexts:           64,
		RequestTimeout:          30 * time.Second,
		ShutdownTimeout:         15 * time.Second,
		ReadTimeout:             30 * time.Second,
		WriteTimeout:            0,
		WriteStallTimeout:       20 * time.Second,
		IdleTimeout:             2 * time.Minute,
		QueryProcessMaxTokens:   16,
		ResponseAffinityEntries: 100000,
		ResponseAffinityTTL:     24 * time.Hour,
		MaxConnections:          10_000,
		MaxConnectionsPerIP:     0,
	}
}

// ValidateAt reports every invalid field, each error naming it from path ("server").
func (c ServerConfig) ValidateAt(path string) error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s.%s: %s", path, field, fmt.Sprintf(format, args...)))
	}
	if _, port, err := net.SplitHostPort(c.Listen); err != nil {
		bad("listen", "must be host:port, got %q", c.Listen)
	} else if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		bad("listen", "port must be a number in [0, 65535], got %q", port)
	}
	if c.BodyLimit < 1024 || c.BodyLimit > 1<<30 {
		bad("body_limit", "must be in [1024, 1073741824] bytes, got %d", c.BodyLimit)
	}
	if c.MaxTextBytes < 1 {
		bad("max_text_bytes", "must be >= 1, got %d", c.MaxTextBytes)
	} else if c.MaxTextBytes > c.BodyLimit {
		bad("max_text_bytes", "must be <= body_limit (%d), got %d", c.BodyLimit, c.MaxTextBytes)
	}
	if c.MaxBatchTexts < 1 || c.MaxBatchTexts > 4096 {
		bad("max_batch_texts", "must be in [1, 4096], got %d", c.MaxBatchTexts)
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{
		{"request_timeout", c.RequestTimeout},
		{"shutdown_timeout", c.ShutdownTimeout},
		{"read_timeout", c.ReadTimeout},
		{"idle_timeout", c.IdleTimeout},
	} {
		if d.v <= 0 {
			bad(d.field, "must be > 0, got %s", d.v)
		}
	}
	if c.WriteTimeout < 0 {
		bad("write_timeout", "must be >= 0 (0 disables it), got %s", c.WriteTimeout)
	}
	if c.WriteStallTimeout < 0 {
		bad("write_stall_timeout", "must be >= 0 (0 disables it), got %s", c.WriteStallTimeout)
	} else if c.WriteTimeout > 0 && c.WriteStallTimeout > 0 {
		bad("write_stall_timeout", "must be 0 when write_timeout is set (%s): fasthttp then sets the write deadline itself", c.WriteTimeout)
	}
	if c.ResponseAffinityEntries < 1 {
		bad("response_affinity_entries", "must be >= 1, got %d", c.ResponseAffinityEntries)
	}
	if c.ResponseAffinityTTL <= 0 {
		bad("response_affinity_ttl", "must be > 0, got %s", c.ResponseAffinityTTL)
	}
	if c.QueryProcessMaxTokens < 1 || c.QueryProcessMaxTokens > 4096 {
		bad("query_process_max_tokens", "must be in [1, 4096], got %d", c.QueryProcessMaxTokens)
	}
	if c.MaxConnections < 1 || c.MaxConnections > 1_000_000 {
		bad("max_connections", "must be in [1, 1000000], got %d", c.MaxConnections)
	}
	if c.MaxConnectionsPerIP < 0 || c.MaxConnectionsPerIP > c.MaxConnections {
		bad("max_connections_per_ip", "must be in [0, max_connections (%d)] (0 disables it), got %d", c.MaxConnections, c.MaxConnectionsPerIP)
	}
	return errors.Join(errs...)
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

// AdminConfig guards the admin endpoints.
type AdminConfig struct {
	// Token is the bearer token of the /admin/ endpoints. Empty (the default) does not
	// register them at all. When set it must be at least 16 bytes.
	Token string `yaml:"token"`
}

// minTokenLen keeps guessable admin tokens out; 16 random bytes are far beyond brute force.
const minTokenLen = 16

// ValidateAt reports a token that is too short or padded with whitespace, named from path
// ("admin").
func (c AdminConfig) ValidateAt(path string) error {
	if c.Token == "" {
		return nil
	}
	var errs []error
	if len(c.Token) < minTokenLen {
		errs = append(errs, fmt.Errorf("%s.token: must be at least %d bytes when set, got %d", path, minTokenLen, len(c.Token)))
	}
	if strings.TrimSpace(c.Token) != c.Token || strings.ContainsAny(c.Token, "\r\n\t ") {
		errs = append(errs, fmt.Errorf("%s.token: must not contain whitespace", path))
	}
	return errors.Join(errs...)
}

// AuthConfig is client authentication on the /v1/ endpoints (docs/security.md).
type AuthConfig struct {
	// KeysFile is a YAML file of API keys, each stored as the SHA-256 digest of the key with a
	// name and an optional token bucket (see docs/security.md for its format); with it set,
	// every /v1/ request needs "Authorization: Bearer <key>". A Kubernetes Secret mounted as
	// a directory serves (not through subPath, which is never updated). Empty (the default):
	// no client authentication.
	KeysFile string `yaml:"keys_file"`
	// ReloadInterval is how often KeysFile is read again; a changed file that parses replaces
	// the keys, one that does not is logged and the old keys stay. 0 reads it only at
	// startup. Default 10s.
	ReloadInterval time.Duration `yaml:"reload_interval"`
}

// DefaultAuthConfig returns no client authentication, re-reading a keys file every 10s once
// one is set.
func DefaultAuthConfig() AuthConfig { return AuthConfig{ReloadInterval: 10 * time.Second} }

// ValidateAt reports a negative reload interval or a padded path, named from path ("auth").
// Whether the file exists and parses is checked when the server loads it.
func (c AuthConfig) ValidateAt(path string) error {
	var errs []error
	if c.ReloadInterval < 0 {
		errs = append(errs, fmt.Errorf("%s.reload_interval: must be >= 0 (0: read only at startup), got %s", path, c.ReloadInterval))
	}
	if strings.TrimSpace(c.KeysFile) != c.KeysFile {
		errs = append(errs, fmt.Errorf("%s.keys_file: must not start or end with whitespace, got %q", path, c.KeysFile))
	}
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
		Server:     DefaultServerConfig(),
		Classifier: classifier.DefaultConfig(),
		Cache:      router.DefaultCacheConfig(),
		Cascade:    router.DefaultCascadeConfig(),
		Batcher:    batcher.DefaultConfig(),
		Decision:   decision.DefaultConfig(),
		Routing:    router.DefaultRoutingConfig(),
		Pools:      PoolsConfig{Fast: DefaultPoolConfig("fast"), Slow: DefaultPoolConfig("slow")},
		Sim:        DefaultSimConfig(),
		Fleet:      fleet.DefaultConfig(),
		Admin:      AdminConfig{},
		Auth:       DefaultAuthConfig(),
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

// Router returns the request pipeline's sections (cache, cascade, batcher, decision, routing).
func (c Config) Router() router.Config {
	return router.Config{Cache: c.Cache, Cascade: c.Cascade, Batcher: c.Batcher, Decision: c.Decision, Routing: c.Routing}
}
