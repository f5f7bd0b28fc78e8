package fleet

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// Config turns fleet mode on and says how to reach the shared Redis. Off by default: a
// single gateway needs nothing but itself.
type Config struct {
	// Enabled turns fleet mode on. Default false.
	Enabled bool `yaml:"enabled"`
	// URL is the Redis (or Valkey) server: redis://host:port[/db] or rediss://host:port[/db]
	// for TLS (verified against the system's CA bundle). A user name may be given in the URL;
	// put the password in the environment (PasswordEnv), not here. Required when enabled.
	URL string `yaml:"url"`
	// PasswordEnv names the environment variable holding the Redis password; "" means none
	// (or the one in URL). When it is set the variable must exist and be non-empty.
	PasswordEnv string `yaml:"password_env"`
	// Password is read from PasswordEnv by the config loader; never from a file, never
	// printed.
	Password string `yaml:"-"`
	// KeyPrefix starts every key and channel this fleet uses, so several fleets can share one
	// Redis. Letters, digits and ".-_:" only. Default "triage".
	KeyPrefix string `yaml:"key_prefix"`
	// Required refuses to start when Redis cannot be reached at startup. Default false: the
	// gateway starts in local mode, says so in a log line and triage_fleet_up, and joins the
	// fleet when Redis answers.
	Required bool `yaml:"required"`
	// DialTimeout bounds connecting to Redis. Default 1s.
	DialTimeout time.Duration `yaml:"dial_timeout"`
	// CommandTimeout bounds one Redis command or pipeline on the request path (shared-cache
	// lookups, slot top-ups). A command that takes longer counts as a miss. Default 50ms.
	CommandTimeout time.Duration `yaml:"command_timeout"`
	// CheckInterval is how often Redis is pinged while up and retried while down. A failed
	// ping or command marks it down at once; the gateway falls back to local state and
	// rejoins after the next successful ping. Default 250ms.
	CheckInterval time.Duration `yaml:"check_interval"`
	// GatewayID names this gateway in the fleet's shared state; "" means a random id made at
	// startup (hostname plus random suffix). Ids must be unique across the fleet.
	GatewayID string `yaml:"gateway_id"`

	Slots    SlotsConfig    `yaml:"slots"`
	Cache    CacheConfig    `yaml:"cache"`
	Affinity AffinityConfig `yaml:"affinity"`
}

// SlotsConfig tunes the fleet-wide slow slots. decision.max_slow_concurrency is the
// whole fleet's in fleet mode.
type SlotsConfig struct {
	// SyncInterval is how often a gateway reports its slow requests in flight to Redis and
	// adjusts its grant of slots. The view of the other gateways' load is at most this old
	// (plus one round trip). Default 100ms.
	SyncInterval time.Duration `yaml:"sync_interval"`
	// LeaseTTL is how long a gateway's grant outlives its last sync: a gateway that dies
	// without releasing gives its slots back within LeaseTTL + SyncInterval. Must be at least
	// 5 × SyncInterval, so a few slow syncs never expire a live gateway. Default 5s.
	LeaseTTL time.Duration `yaml:"lease_ttl"`
	// Headroom is the least number of unused slots a gateway keeps in its grant beyond those
	// in use, so that most slow requests take a slot without a Redis round trip; busier
	// gateways keep more (about two sync intervals of their recent slow rate). >= 1.
	// Default 2.
	Headroom int `yaml:"headroom"`
	// FallbackSlots is the slot count of a gateway that has never reached Redis (started while it
	// was down). A gateway that had a grant keeps it through an outage. >= 0. Default 4.
	FallbackSlots int `yaml:"fallback_slots"`
}

// CacheConfig tunes the shared (second-tier) result cache.
type CacheConfig struct {
	// Enabled turns the shared tier on (fleet mode only). Default true.
	Enabled bool `yaml:"enabled"`
	// TTL is how long a shared entry lives. Default 10m. The memory bound is the Redis
	// server's own: run it with maxmemory and an LRU eviction policy (the gateway warns at
	// startup when it has none).
	TTL time.Duration `yaml:"ttl"`
	// WriteQueue bounds the results waiting to be written; past it writes are dropped (the
	// shared tier is a cache: a dropped write is a later miss). Default 4096.
	WriteQueue int `yaml:"write_queue"`
}

// AffinityConfig tunes what the gateways tell each other about the replicas: each pick of a
// prefix-aware policy (so a conversation keeps its replica whichever gateway its turns reach)
// and each gateway's requests in flight per replica (so every policy balances the fleet's
// load). Both travel over Redis pub/sub and are hints: none is waited for on the request path.
type AffinityConfig struct {
	// Enabled shares picks and in-flight counts (fleet mode only). Default true.
	Enabled bool `yaml:"enabled"`
	// LoadInterval is how often a gateway publishes its requests in flight per replica; the
	// other gateways' part of a candidate's load is at most this old (plus delivery).
	// Default 100ms.
	LoadInterval time.Duration `yaml:"load_interval"`
	// LoadExpiry drops a gateway's counts when nothing was heard from it for this long (it
	// died, or the messages stopped). >= 2 × load_interval. Default 1s.
	LoadExpiry time.Duration `yaml:"load_expiry"`
	// PublishQueue bounds the picks waiting to be published; past it picks are dropped and
	// counted (a dropped pick costs at most a cache hit elsewhere). Default 4096.
	PublishQueue int `yaml:"publish_queue"`
}

// DefaultConfig returns fleet mode off, with the defaults documented on each field.
func DefaultConfig() Config {
	return Config{
		KeyPrefix:      "triage",
		DialTimeout:    time.Second,
		CommandTimeout: 50 * time.Millisecond,
		CheckInterval:  250 * time.Millisecond,
		Slots: SlotsConfig{
			SyncInterval:  100 * time.Millisecond,
			LeaseTTL:      5 * time.Second,
			Headroom:      2,
			FallbackSlots: 4,
		},
		Cache:    CacheConfig{Enabled: true, TTL: 10 * time.Minute, WriteQueue: 4096},
		Affinity: AffinityConfig{Enabled: true, LoadInterval: 100 * time.Millisecond, LoadExpiry: time.Second, PublishQueue: 4096},
	}
}

// Validate is ValidateAt("fleet").
func (c Config) Validate() error { return c.ValidateAt("fleet") }

// ValidateAt reports every invalid field, each named from path ("fleet.url"). Fields are
// checked whether or not fleet mode is on, so a typo does not wait for the day it is.
func (c Config) ValidateAt(path string) error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s.%s: %s", path, field, fmt.Sprintf(format, args...)))
	}
	if c.Enabled || c.URL != "" {
		if err := checkURL(c.URL); err != nil {
			bad("url", "%v", err)
		}
	}
	if c.KeyPrefix == "" || strings.Trim(c.KeyPrefix, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_:") != "" {
		bad("key_prefix", "must be non-empty letters, digits and \".-_:\", got %q", c.KeyPrefix)
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{
		{"dial_timeout", c.DialTimeout}, {"command_timeout", c.CommandTimeout}, {"check_interval", c.CheckInterval},
		{"slots.sync_interval", c.Slots.SyncInterval}, {"slots.lease_ttl", c.Slots.LeaseTTL}, {"cache.ttl", c.Cache.TTL},
		{"affinity.load_interval", c.Affinity.LoadInterval}, {"affinity.load_expiry", c.Affinity.LoadExpiry},
	} {
		if d.v <= 0 {
			bad(d.field, "must be > 0, got %s", d.v)
		}
	}
	if c.Slots.SyncInterval > 0 && c.Slots.LeaseTTL < 5*c.Slots.SyncInterval {
		bad("slots.lease_ttl", "must be >= 5 × slots.sync_interval (%s), got %s", 5*c.Slots.SyncInterval, c.Slots.LeaseTTL)
	}
	if c.Slots.Headroom < 1 {
		bad("slots.headroom", "must be >= 1, got %d", c.Slots.Headroom)
	}
	if c.Slots.FallbackSlots < 0 {
		bad("slots.fallback_slots", "must be >= 0, got %d", c.Slots.FallbackSlots)
	}
	if c.Cache.WriteQueue < 1 || c.Cache.WriteQueue > 1<<20 {
		bad("cache.write_queue", "must be in [1, %d], got %d", 1<<20, c.Cache.WriteQueue)
	}
	if c.Affinity.LoadInterval > 0 && c.Affinity.LoadExpiry < 2*c.Affinity.LoadInterval {
		bad("affinity.load_expiry", "must be >= 2 × affinity.load_interval (%s), got %s", 2*c.Affinity.LoadInterval, c.Affinity.LoadExpiry)
	}
	if c.Affinity.PublishQueue < 1 || c.Affinity.PublishQueue > 1<<20 {
		bad("affinity.publish_queue", "must be in [1, %d], got %d", 1<<20, c.Affinity.PublishQueue)
	}
	if strings.ContainsAny(c.GatewayID, " \t\r\n") {
		bad("gateway_id", "must not contain whitespace, got %q", c.GatewayID)
	}
	return errors.Join(errs...)
}

// checkURL accepts redis:// and rediss:// URLs with a host and no password.
func checkURL(raw string) error {
	if raw == "" {
		return errors.New("required when fleet mode is on (redis://host:port or rediss://host:port)")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("cannot parse %q: %v", redact(raw), err)
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return fmt.Errorf("scheme must be redis or rediss, got %q", u.Scheme)
	}
	if u.Host == "" {
		return fmt.Errorf("%q has no host", redact(raw))
	}
	if _, set := u.User.Password(); set {
		return errors.New("must not carry a password; name an environment variable in password_env")
	}
	return nil
}

// redact hides anything after a "://user:" so an error never prints a password.
func redact(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Redacted()
	}
	if i := strings.Index(raw, "@"); i >= 0 {
		return "<redacted>" + raw[i:]
	}
	return raw
}
