package upstream

import (
	"context"
	"io"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/sim"
)

// simClock is a virtual clock for sim replicas: sleeps advance it at once.
type simClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *simClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *simClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return ctx.Err()
}

// mockllm exports what the signal policies read under vLLM's names, so the
// scraper and least-latency work on it as on vLLM: after one round of
// least-request (no measurements yet), the replica that decodes 20 times
// faster takes every request.
func TestLeastLatencyOnSimulatedReplicas(t *testing.T) {
	replica := func(name string, perToken time.Duration) string {
		c := sim.FastPreset()
		c.Name, c.Model = name, "m"
		c.TTFTBase, c.PrefillPerToken, c.Jitter = 0, 0, 0
		c.DecodePerToken = perToken
		s, err := sim.New(c, sim.Options{Clock: &simClock{now: time.Unix(1_700_000_000, 0)}})
		require.NoError(t, err)
		hs := httptest.NewServer(s)
		t.Cleanup(hs.Close)
		return hs.URL
	}
	cfg := testConfig(replica("slow", 20*time.Millisecond), replica("fast", time.Millisecond))
	cfg.ScrapeInterval = Duration(2 * time.Second)
	cfg.Policy.Name = "least-latency"
	cfg.Policy.Trace.Enabled = true
	f := newFixture(t, cfg, nil, nil)
	p, ctx := f.pool, context.Background()
	ask := func() string {
		t.Helper()
		resp, err := p.Do(ctx, &ForwardRequest{Method: "POST", Path: "/v1/completions",
			Body: []byte(`{"model":"m","prompt":"hello","max_tokens":8}`)})
		require.NoError(t, err)
		_, err = io.Copy(io.Discard, resp.Body)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		return resp.ReplicaID
	}

	p.scrapeOnce(ctx)
	got := map[string]int{}
	for range 4 {
		got[ask()]++
	}
	require.Equal(t, map[string]int{"r0": 2, "r1": 2}, got, "unmeasured: least-request spreads them")
	require.Equal(t, "fallback", p.Tracer().Recent(1)[0].Note)

	f.clock.advance(2 * time.Second)
	p.scrapeOnce(ctx)
	st := p.Replicas()
	require.NotNil(t, st[0].MeanTPOTSeconds)
	require.NotNil(t, st[1].MeanTPOTSeconds)
	require.InDelta(t, 0.020, *st[0].MeanTPOTSeconds, 1e-9)
	require.InDelta(t, 0.001, *st[1].MeanTPOTSeconds, 1e-9)
	require.NotNil(t, st[1].MeanTTFTSeconds)
	require.NotNil(t, st[1].GenerationTokensPerSec)
	require.InDelta(t, 8, *st[1].GenerationTokensPerSec, 1e-9, "16 tokens in 2 s")

	for range 4 {
		require.Equal(t, "r1", ask())
	}
}
