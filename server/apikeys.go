package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/prometheus/client_golang/prometheus"
	"gopkg.in/yaml.v3"

	"github.com/triage-gw/triage/upstream"
	"github.com/triage-gw/triage/upstream/policy"
)

// Bounds of a keys file: its size, how many keys it holds (their names label metrics, so the
// set must stay small) and the shortest key a client may present (keys are compared as
// unsalted SHA-256 digests, which is sound only for keys with enough randomness).
const (
	maxKeysFileBytes = 1 << 20
	maxKeys          = 1000
	minKeyBytes      = 20
)

var keyNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// keysFile is the keys file's format (docs/security.md):
//
//	keys:
//	  - name: team-a                 # the key's label on metrics and in logs
//	    sha256: 9f86d081884c7d65...  # hex SHA-256 of the key (printf %s "$KEY" | sha256sum)
//	    token_bucket:                # optional: per-key admission in estimated input tokens
//	      capacity: 100000
//	      refill_per_second: 10000
type keysFile struct {
	Keys []keyEntry `yaml:"keys"`
}

type keyEntry struct {
	Name        string                      `yaml:"name"`
	SHA256      string                      `yaml:"sha256"`
	TokenBucket *upstream.TokenBucketConfig `yaml:"token_bucket"`
}

// apiKey is one configured key. bucket is nil when the key has no admission limit.
type apiKey struct {
	name   string
	bucket *upstream.TokenBucket
	rate   float64
	cfg    upstream.TokenBucketConfig
}

// keySet is one loaded keys file; replaced whole on reload.
type keySet struct {
	byDigest map[[sha256.Size]byte]*apiKey
	byName   map[string]*apiKey
	sum      [sha256.Size]byte // of the file, to notice changes
}

// parseKeys reads a keys file, reporting every problem at once. prev, when set, lends its
// buckets to keys whose name and bucket settings are unchanged, so a reload does not refill
// them.
func parseKeys(data []byte, prev *keySet) (*keySet, error) {
	var f keysFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("keys file: %w", err)
	}
	var errs []error
	bad := func(i int, format string, args ...any) {
		errs = append(errs, fmt.Errorf("keys[%d]: %s", i, fmt.Sprintf(format, args...)))
	}
	switch {
	case len(f.Keys) == 0:
		return nil, errors.New("keys file: lists no keys")
	case len(f.Keys) > maxKeys:
		return nil, fmt.Errorf("keys file: lists %d keys, at most %d", len(f.Keys), maxKeys)
	}
	ks := &keySet{byDigest: make(map[[sha256.Size]byte]*apiKey, len(f.Keys)), byName: make(map[string]*apiKey, len(f.Keys)),
		sum: sha256.Sum256(data)}
	for i, e := range f.Keys {
		if !keyNameRE.MatchString(e.Name) {
			bad(i, "name: must be 1 to 64 of A-Z a-z 0-9 _ . - starting with a letter or digit, got %q", e.Name)
		} else if ks.byName[e.Name] != nil {
			bad(i, "name: %q is given twice", e.Name)
		}
		var d [sha256.Size]byte
		if len(e.SHA256) != hex.EncodedLen(sha256.Size) {
			bad(i, "sha256: must be the 64 hex digits of the key's SHA-256 digest")
			continue
		}
		if _, err := hex.Decode(d[:], []byte(e.SHA256)); err != nil {
			bad(i, "sha256: must be the 64 hex digits of the key's SHA-256 digest")
			continue
		} else if ks.byDigest[d] != nil {
			bad(i, "sha256: the same key as %q", ks.byDigest[d].name)
			continue
		}
		k := &apiKey{name: e.Name}
		if e.TokenBucket != nil {
			if err := e.TokenBucket.Validate(); err != nil {
				bad(i, "%v", err)
				continue
			}
			k.cfg, k.rate = *e.TokenBucket, e.TokenBucket.RefillPerSecond
			if old := prev.lookupName(e.Name); old != nil && old.bucket != nil && old.cfg == k.cfg {
				k.bucket = old.bucket
			} else {
				k.bucket, _ = upstream.NewTokenBucket(k.cfg, nil)
			}
		}
		ks.byDigest[d], ks.byName[e.Name] = k, k
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("keys file: %w", err)
	}
	return ks, nil
}

func (ks *keySet) lookupName(name string) *apiKey {
	if ks == nil {
		return nil
	}
	return ks.byName[name]
}

// readKeysFile reads path, refusing one over maxKeysFileBytes.
func readKeysFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxKeysFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxKeysFileBytes {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, maxKeysFileBytes)
	}
	return data, nil
}

// keyAuth checks client API keys against the keys file, which it re-reads every interval.
// The current set is swapped whole, so a request sees one file or the other.
type keyAuth struct {
	path     string
	interval time.Duration
	log      *slog.Logger
	set      atomic.Pointer[keySet]
	m        *authMetrics
	reloadMu sync.Mutex
}

type authMetrics struct {
	requests *prometheus.CounterVec // key, outcome
	keys     prometheus.Gauge
	reloads  *prometheus.CounterVec // result
}

func newAuthMetrics(reg prometheus.Registerer) (*authMetrics, error) {
	m := &authMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "triage_auth_requests_total",
			Help: "Requests to the /v1/ endpoints by API key name (configured names only; \"none\" for a missing or unknown key) and outcome: ok, missing, invalid, rate_limited.",
		}, []string{"key", "outcome"}),
		keys: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "triage_auth_keys",
			Help: "API keys loaded from auth.keys_file.",
		}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "triage_auth_reloads_total",
			Help: "Reloads of a changed auth.keys_file by result: ok, error (the old keys stay).",
		}, []string{"result"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.keys, m.reloads} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("server: register auth metrics: %w", err)
		}
	}
	return m, nil
}

// newKeyAuth loads path; a file that cannot be read or parsed stops startup.
func newKeyAuth(path string, interval time.Duration, log *slog.Logger, reg prometheus.Registerer) (*keyAuth, error) {
	a := &keyAuth{path: path, interval: interval, log: log}
	var err error
	if a.m, err = newAuthMetrics(reg); err != nil {
		return nil, err
	}
	data, err := readKeysFile(path)
	if err != nil {
		return nil, fmt.Errorf("auth.keys_file: %w", err)
	}
	ks, err := parseKeys(data, nil)
	if err != nil {
		return nil, fmt.Errorf("auth.keys_file %s: %w", path, err)
	}
	a.install(ks)
	return a, nil
}

func (a *keyAuth) install(ks *keySet) {
	a.set.Store(ks)
	a.m.keys.Set(float64(len(ks.byName)))
	for name := range ks.byName {
		for _, o := range []string{"ok", "rate_limited"} {
			a.m.requests.WithLabelValues(name, o)
		}
	}
}

// reload reads the file again and installs it if it changed and parses.
func (a *keyAuth) reload() {
	a.reloadMu.Lock()
	defer a.reloadMu.Unlock()
	data, err := readKeysFile(a.path)
	if err == nil && sha256.Sum256(data) == a.set.Load().sum {
		return
	}
	var ks *keySet
	if err == nil {
		ks, err = parseKeys(data, a.set.Load())
	}
	if err != nil {
		a.m.reloads.WithLabelValues("error").Inc()
		a.log.Error("API keys not reloaded; the previous keys stay", "keys_file", a.path, "err", err)
		return
	}
	a.install(ks)
	a.m.reloads.WithLabelValues("ok").Inc()
	a.log.Info("API keys reloaded", "keys_file", a.path, "keys", len(ks.byName))
}

// Run re-reads the keys file every interval until ctx ends.
func (a *keyAuth) Run(ctx context.Context) error {
	if a.interval <= 0 {
		return nil
	}
	t := time.NewTicker(a.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			a.reload()
		}
	}
}

// errors of client authentication; answered 401 by errorResponse.
var (
	errMissingKey = &apiError{status: http.StatusUnauthorized, typ: typeAuthentication, code: "missing_api_key",
		message: "this gateway needs an API key: send Authorization: Bearer <key> (or x-api-key: <key>)"}
	errInvalidKey = &apiError{status: http.StatusUnauthorized, typ: typeAuthentication, code: "invalid_api_key",
		message: "the API key is not valid"}
)

// HeaderAPIKey carries the API key for clients that do not send Authorization: Bearer
// (Anthropic's). Like Authorization it is never forwarded upstream.
const HeaderAPIKey = "x-api-key"

// authenticate returns the key an Authorization (or x-api-key) header names. The presented key is hashed
// and looked up by its digest, so no comparison runs over the key itself; it is never logged
// nor repeated in an answer.
func (a *keyAuth) authenticate(c *fiber.Ctx) (*apiKey, error) {
	v := c.Get(fiber.HeaderAuthorization)
	tok, ok := "", false
	switch {
	case v != "":
		tok, ok = bearerToken(v)
	case c.Get(HeaderAPIKey) != "":
		// Anthropic's clients send the key in x-api-key.
		tok, ok = c.Get(HeaderAPIKey), true
	default:
		a.m.requests.WithLabelValues("none", "missing").Inc()
		return nil, errMissingKey
	}
	if !ok || len(tok) < minKeyBytes {
		a.m.requests.WithLabelValues("none", "invalid").Inc()
		return nil, errInvalidKey
	}
	k := a.set.Load().byDigest[sha256.Sum256([]byte(tok))]
	if k == nil {
		a.m.requests.WithLabelValues("none", "invalid").Inc()
		return nil, errInvalidKey
	}
	return k, nil
}

// admit charges the key's bucket for a request whose body has n bytes, in estimated input
// tokens (n/4, at least 1, the estimate the replica policies use).
func (a *keyAuth) admit(k *apiKey, n int) error {
	if k.bucket != nil {
		cost := max(1, n/4)
		if float64(cost) > k.cfg.Capacity {
			a.m.requests.WithLabelValues(k.name, "rate_limited").Inc()
			return &apiError{status: http.StatusTooManyRequests, typ: typeRateLimit, code: "key_rate_limited",
				message: fmt.Sprintf("the request costs %d estimated input tokens, more than API key %s's token bucket holds (%g)", cost, k.name, k.cfg.Capacity)}
		}
		if err := k.bucket.Admit(&policy.Request{InputTokens: cost}); err != nil {
			a.m.requests.WithLabelValues(k.name, "rate_limited").Inc()
			wait := 1
			if deficit := float64(cost) - k.bucket.Available(); deficit > 0 && k.rate > 0 {
				wait = max(1, int(math.Ceil(deficit/k.rate)))
			}
			return &apiError{status: http.StatusTooManyRequests, typ: typeRateLimit, code: "key_rate_limited",
				message:    fmt.Sprintf("API key %s is over its token bucket (cost %d estimated input tokens); retry after %ds", k.name, cost, wait),
				retryAfter: strconv.Itoa(wait)}
		}
	}
	a.m.requests.WithLabelValues(k.name, "ok").Inc()
	return nil
}
