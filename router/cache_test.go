package router

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeClock is the cache's injected clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func newTestCache(t *testing.T, cfg CacheConfig) (*resultCache, *fakeClock) {
	t.Helper()
	clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	rc, err := newResultCache(cfg, clk.Now)
	require.NoError(t, err)
	t.Cleanup(rc.close)
	return rc, clk
}

func TestNormalize(t *testing.T) {
	for in, want := range map[string]string{
		"":                      "",
		"a":                     "a",
		"a b":                   "a b",
		"  a  b  ":              "a b",
		"a\n\tb\r\nc":           "a b c",
		"\u00a0a\u2003b\u3000":  "a b", // Unicode spaces count
		"x [SEP] y":             "x [SEP] y",
		"  \n ":                 "",
		"héllo   wörld":         "héllo wörld",
		"tab\tonly":             "tab only",
		"trailing ":             "trailing",
		" leading":              "leading",
		"many     inner spaces": "many inner spaces",
	} {
		require.Equal(t, want, normalize(in), "normalize(%q)", in)
		require.Equal(t, in == want, isNormal(in), "isNormal(%q)", in)
		require.Equal(t, normalize(in), normalize(normalize(in)), "idempotent")
	}
}

func TestCacheStoresModelOutputByVersionAndText(t *testing.T) {
	rc, _ := newTestCache(t, CacheConfig{Enabled: true, MaxEntries: 100, TTL: time.Minute})
	_, ok := rc.get("v1", "hello")
	require.False(t, ok)

	rc.set("v1", "hello", cached{pSlow: 0.8, tokens: 5})
	rc.wait()
	got, ok := rc.get("v1", "hello")
	require.True(t, ok)
	require.Equal(t, cached{pSlow: 0.8, tokens: 5}, got)

	_, ok = rc.get("v2", "hello")
	require.False(t, ok, "a new model version never sees the old one's results")
	_, ok = rc.get("v1", "hello ")
	require.False(t, ok, "the cache keys exact (already normalised) text")
	_, ok = rc.get("v", "1\x00hello")
	require.False(t, ok)
}

func TestCacheExpiresOnTheInjectedClock(t *testing.T) {
	rc, clk := newTestCache(t, CacheConfig{Enabled: true, MaxEntries: 100, TTL: time.Minute})
	rc.set("v1", "t", cached{pSlow: 0.3})
	rc.wait()
	clk.advance(59 * time.Second)
	_, ok := rc.get("v1", "t")
	require.True(t, ok)
	clk.advance(time.Second)
	_, ok = rc.get("v1", "t")
	require.False(t, ok, "expired at exactly TTL")
}

func TestCacheWithoutTTLKeepsEntries(t *testing.T) {
	rc, clk := newTestCache(t, CacheConfig{Enabled: true, MaxEntries: 100, TTL: 0})
	rc.set("v1", "t", cached{pSlow: 0.3})
	rc.wait()
	clk.advance(24 * 365 * time.Hour)
	_, ok := rc.get("v1", "t")
	require.True(t, ok)
}

func TestDisabledCacheAlwaysMisses(t *testing.T) {
	rc, _ := newTestCache(t, CacheConfig{Enabled: false, MaxEntries: 100, TTL: time.Minute})
	rc.set("v1", "t", cached{pSlow: 0.3})
	rc.wait()
	_, ok := rc.get("v1", "t")
	require.False(t, ok)
	require.Zero(t, rc.evictions())
}

func TestCacheEvictsBeyondMaxEntriesAndCountsIt(t *testing.T) {
	rc, _ := newTestCache(t, CacheConfig{Enabled: true, MaxEntries: 10, TTL: 0})
	for i := range 200 {
		// Repeated gets make early keys frequent, so TinyLFU admits and evicts.
		key := strings.Repeat("k", i%50+1)
		rc.get("v1", key)
		rc.set("v1", key, cached{pSlow: 0.5})
		rc.wait()
	}
	require.Positive(t, rc.evictions())
	n := 0
	for i := range 50 {
		if _, ok := rc.get("v1", strings.Repeat("k", i+1)); ok {
			n++
		}
	}
	require.LessOrEqual(t, n, 10)
}
