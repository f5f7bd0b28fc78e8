package server

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// Config is what the HTTP layer serves by. The config package composes its parts under the
// YAML keys server (HTTP), admin and auth; Simulated comes from sim.enabled.
type Config struct {
	HTTP  HTTPConfig
	Admin AdminConfig
	Auth  AuthConfig
	// Simulated says the pools are the built-in simulators: readiness says so, with a warning.
	Simulated bool
}

// DefaultConfig returns the defaults of every part: no admin endpoints, no client
// authentication, real pools.
func DefaultConfig() Config {
	return Config{HTTP: DefaultHTTPConfig(), Auth: DefaultAuthConfig()}
}

// Validate reports every invalid field, each named by its YAML path ("server.listen").
func (c Config) Validate() error {
	return errors.Join(c.HTTP.ValidateAt("server"), c.Admin.ValidateAt("admin"), c.Auth.ValidateAt("auth"))
}

// HTTPConfig is the "server" section: where the gateway listens, what it accepts and how long
// things may take.
type HTTPConfig struct {
	// Listen is the TCP address to serve on. Default "127.0.0.1:8080"; the --listen flag
	// overrides it.
	Listen string `yaml:"listen"`
	// BodyLimit is the largest request body in bytes; larger bodies get 413. Default 1 MiB.
	BodyLimit int `yaml:"body_limit"`
	// MaxTextBytes bounds the text handed to the classifier for one request (instruction and
	// context together, in bytes, after whitespace normalisation): a longer one is classified
	// on its first MaxTextBytes bytes, cut at a space (the encoder reads only its first 256
	// word pieces anyway); the request goes upstream whole. Default 16 KiB.
	MaxTextBytes int `yaml:"max_text_bytes"`
	// MaxBatchTexts is the most texts one POST /v1/classify may carry. Default 64.
	MaxBatchTexts int `yaml:"max_batch_texts"`
	// SplitPasted classifies a text without a context whose first or last paragraph (or line)
	// is short and the rest long prose (a document pasted into the message) as that paragraph,
	// the instruction, with the rest as its context; the request goes upstream as it came.
	// Default true; false classifies such a text as one instruction (pasted.go).
	SplitPasted bool `yaml:"split_pasted"`
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

// DefaultHTTPConfig returns the defaults documented on HTTPConfig.
func DefaultHTTPConfig() HTTPConfig {
	return HTTPConfig{
		Listen:                  "127.0.0.1:8080",
		BodyLimit:               1 << 20,
		MaxTextBytes:            16 << 10,
		MaxBatchTexts:           64,
		SplitPasted:             true,
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
func (c HTTPConfig) ValidateAt(path string) error {
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
	if c.MaxTextBytes < 64 {
		bad("max_text_bytes", "must be >= 64, got %d", c.MaxTextBytes)
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
