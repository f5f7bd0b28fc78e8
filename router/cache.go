package router

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/dgraph-io/ristretto/v2"

	"github.com/triage-gw/triage/classifier"
)

// CacheConfig sizes the result cache in front of the classifier. It holds model outputs
// (P(slow) and token counts), never decisions.
type CacheConfig struct {
	// Enabled turns the cache on. Default true.
	Enabled bool `yaml:"enabled"`
	// MaxEntries is the most results kept (each costs 1). Default 100000.
	MaxEntries int `yaml:"max_entries"`
	// TTL is how long a result stays usable; 0 keeps it until evicted. Default 10m.
	TTL time.Duration `yaml:"ttl"`
}

// DefaultCacheConfig returns an enabled cache of 100000 entries with a 10 minute TTL.
func DefaultCacheConfig() CacheConfig {
	return CacheConfig{Enabled: true, MaxEntries: 100_000, TTL: 10 * time.Minute}
}

// ValidateAt reports every invalid field, each error naming it from path ("cache").
func (c CacheConfig) ValidateAt(path string) error {
	var errs []error
	if c.MaxEntries < 1 || c.MaxEntries > 1<<26 {
		errs = append(errs, fmt.Errorf("%s.max_entries: must be in [1, %d], got %d", path, 1<<26, c.MaxEntries))
	}
	if c.TTL < 0 {
		errs = append(errs, fmt.Errorf("%s.ttl: must be >= 0 (0 means no expiry), got %s", path, c.TTL))
	}
	return errors.Join(errs...)
}

// SharedCache is an optional second result-cache tier behind the in-process one, shared by
// the gateways of a fleet (package fleet implements it on Redis). It stores, keyed by
// version + text, the small values this package encodes (model outputs, never decisions).
//
// Contract: Get looks texts up in one round trip; found[i] is false on a miss and on any
// trouble (the tier is optional: an unreachable tier is a miss, never an error). Set queues a
// value and never blocks; it may drop it. Both are safe for concurrent use.
type SharedCache interface {
	Get(ctx context.Context, version string, texts []string) (vals []string, found []bool)
	Set(version, text, val string)
}

// cached is a model output as the caches keep it: P(slow), tokens and the stage that
// produced it. Never a decision: every hit is decided again under the current load.
type cached struct {
	pSlow  float32
	tokens int
	stage  classifier.Stage
}

// encode is the shared tier's value: 4 bytes float32 P(slow), 4 bytes tokens, 1 byte stage,
// little-endian.
func (c cached) encode() string {
	var b [9]byte
	binary.LittleEndian.PutUint32(b[:4], math.Float32bits(c.pSlow))
	binary.LittleEndian.PutUint32(b[4:8], uint32(max(c.tokens, 0)))
	b[8] = byte(c.stage)
	return string(b[:])
}

// decodeCached reads encode's value, refusing anything else (another format, a corrupt or
// foreign entry) as a miss.
func decodeCached(s string) (cached, bool) {
	if len(s) != 9 {
		return cached{}, false
	}
	p := math.Float32frombits(binary.LittleEndian.Uint32([]byte(s[:4])))
	st := classifier.Stage(s[8])
	if math.IsNaN(float64(p)) || p < 0 || p > 1 || (st != classifier.StageEncoder && st != classifier.StageStatic) {
		return cached{}, false
	}
	return cached{pSlow: p, tokens: int(binary.LittleEndian.Uint32([]byte(s[4:8]))), stage: st}, true
}

// resultCache maps model version + normalised text to the model's output, in ristretto.
//
// Lossy, like ristretto: set may drop an entry (admission policy, full buffers), so a text
// just classified can miss again; only successful results are ever stored. Expiry is checked
// against the injected clock (the same TTL is given to ristretto so it reclaims the space),
// which lets tests expire entries without sleeping.
type resultCache struct {
	c   *ristretto.Cache[string, entry] // nil when disabled
	ttl time.Duration
	now func() time.Time
}

type entry struct {
	cached
	expires time.Time // zero: no expiry
}

func newResultCache(cfg CacheConfig, now func() time.Time) (*resultCache, error) {
	rc := &resultCache{ttl: cfg.TTL, now: now}
	if !cfg.Enabled {
		return rc, nil
	}
	c, err := ristretto.NewCache(&ristretto.Config[string, entry]{
		NumCounters:        int64(cfg.MaxEntries) * 10, // ristretto's advice: 10x the entries
		MaxCost:            int64(cfg.MaxEntries),      // every entry costs 1
		BufferItems:        64,
		Metrics:            true,
		IgnoreInternalCost: true,
	})
	if err != nil {
		return nil, fmt.Errorf("result cache: %w", err)
	}
	rc.c = c
	return rc, nil
}

// cacheKey separates version and text with NUL, which neither contains in practice and which
// keeps "v1"+"2x" apart from "v12"+"x".
func cacheKey(version, text string) string { return version + "\x00" + text }

// get returns the stored output for text under the model version.
func (rc *resultCache) get(version, text string) (cached, bool) {
	if rc.c == nil {
		return cached{}, false
	}
	e, ok := rc.c.Get(cacheKey(version, text))
	if !ok || (!e.expires.IsZero() && !rc.now().Before(e.expires)) {
		return cached{}, false
	}
	return e.cached, true
}

// set stores a successful model output. It may be dropped.
func (rc *resultCache) set(version, text string, v cached) {
	if rc.c == nil {
		return
	}
	e := entry{cached: v}
	if rc.ttl > 0 {
		e.expires = rc.now().Add(rc.ttl)
	}
	rc.c.SetWithTTL(cacheKey(version, text), e, 1, rc.ttl)
}

// wait blocks until buffered sets are applied (tests).
func (rc *resultCache) wait() {
	if rc.c != nil {
		rc.c.Wait()
	}
}

// evictions returns ristretto's count of evicted keys.
func (rc *resultCache) evictions() float64 {
	if rc.c == nil {
		return 0
	}
	return float64(rc.c.Metrics.KeysEvicted())
}

// close stops ristretto's goroutines.
func (rc *resultCache) close() {
	if rc.c != nil {
		rc.c.Close()
	}
}
