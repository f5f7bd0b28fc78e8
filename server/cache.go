package server

import (
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/dgraph-io/ristretto/v2"

	"github.com/triage-gw/triage/classifier"
	"github.com/triage-gw/triage/config"
)

// normalize trims s and collapses every run of Unicode whitespace into one ASCII space.
// The classifier's tokenizer splits on whitespace, so texts that differ only in spacing are
// the same model input; normalising before the cache lookup and before classification makes
// them share one cache entry and one batcher slot, and the cached value is exactly the
// model's output for the key's text.
func normalize(s string) string {
	if isNormal(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	space := false
	for _, r := range s {
		if unicode.IsSpace(r) {
			space = b.Len() > 0
			continue
		}
		if space {
			b.WriteByte(' ')
			space = false
		}
		b.WriteRune(r)
	}
	return b.String()
}

// isNormal reports whether normalize(s) == s, without allocating.
func isNormal(s string) bool {
	prevSpace := true // a leading space is not normal
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			return false // let the slow path rewrite it like range does
		}
		sp := unicode.IsSpace(r)
		if sp && (r != ' ' || prevSpace) {
			return false
		}
		prevSpace = sp
		i += n
	}
	return !prevSpace || s == ""
}

// cacheEntry is a model output. Never a decision: every hit is decided again under the
// current load.
type cacheEntry struct {
	pSlow   float32
	tokens  int
	expires time.Time // zero: no expiry
}

// resultCache maps model version + normalised text to the model's output, in ristretto.
//
// Lossy, like ristretto: Set may drop an entry (admission policy, full buffers), so a text
// just classified can miss again; only successful results are ever stored. Expiry is checked
// against the injected clock (the same TTL is given to ristretto so it reclaims the space),
// which lets tests expire entries without sleeping.
type resultCache struct {
	c   *ristretto.Cache[string, cacheEntry] // nil when disabled
	ttl time.Duration
	now func() time.Time
}

func newResultCache(cfg config.CacheConfig, now func() time.Time) (*resultCache, error) {
	rc := &resultCache{ttl: cfg.TTL, now: now}
	if !cfg.Enabled {
		return rc, nil
	}
	c, err := ristretto.NewCache(&ristretto.Config[string, cacheEntry]{
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
func (rc *resultCache) get(version, text string) (classifier.Result, bool) {
	if rc.c == nil {
		return classifier.Result{}, false
	}
	e, ok := rc.c.Get(cacheKey(version, text))
	if !ok || (!e.expires.IsZero() && !rc.now().Before(e.expires)) {
		return classifier.Result{}, false
	}
	return resultOf(e), true
}

// set stores a successful model output. It may be dropped.
func (rc *resultCache) set(version, text string, r classifier.Result) {
	if rc.c == nil {
		return
	}
	e := cacheEntry{pSlow: r.PSlow, tokens: r.Tokens}
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

func resultOf(e cacheEntry) classifier.Result {
	label := classifier.FastLabel
	if e.pSlow > classifier.LabelCutoff {
		label = classifier.SlowLabel
	}
	return classifier.Result{PSlow: e.pSlow, Label: label, Tokens: e.tokens}
}
