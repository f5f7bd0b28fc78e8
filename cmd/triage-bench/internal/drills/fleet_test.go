package drills

import (
	"context"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/bench/stats"
	"github.com/triage-gw/triage/config"
	"github.com/triage-gw/triage/upstream/policy"
)

func TestParseFleetFlags(t *testing.T) {
	c, err := parseFleetFlags(nil, io.Discard)
	require.NoError(t, err)
	require.Equal(t, []string{"lmetric-sticky"}, c.Policies)
	require.Equal(t, 3, c.Gateways)
	require.Equal(t, 28.0, c.Trace.Rate, "the policies sweep's trace")

	c, err = parseFleetFlags([]string{"--policies", "prefix-cache, lmetric-sticky", "--trace-duration", "2s", "--trace-seed", "7"}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, []string{"prefix-cache", "lmetric-sticky"}, c.Policies)
	require.Equal(t, 2*time.Second, c.Trace.Duration)
	require.Equal(t, uint64(7), c.Trace.Seed)

	_, err = parseFleetFlags([]string{"--gateways", "0", "--poll", "0s", "--policies", "nope"}, io.Discard)
	require.ErrorContains(t, err, "--gateways must be >= 1")
	require.ErrorContains(t, err, "--poll must be > 0")
	require.ErrorContains(t, err, `"nope"`)
}

// The generated configs load as the gateway loads them, with what the scenario needs.
func TestFleetGatewayYAMLLoads(t *testing.T) {
	reps := []*replica{{id: "a-0", url: "http://127.0.0.1:9001"}, {id: "a-1", url: "http://127.0.0.1:9002"}}
	_, fleet, noAffinity := (&fleetConfig{Gateways: 3}).modes()
	for _, m := range []fleetMode{fleet, noAffinity} {
		y := gatewayYAML{mode: m, prefix: "bench-set01", redisURL: "redis://127.0.0.1:6390", base: 0.01, alpha: 0, maxSlow: 12,
			policy: "lmetric-sticky", fast: reps[:1], slow: reps}
		path := filepath.Join(t.TempDir(), "gw.yaml")
		require.NoError(t, os.WriteFile(path, []byte(y.render(2)), 0o644))
		cfg, err := config.Load(config.Sources{File: path, Environ: []string{}})
		require.NoError(t, err)
		require.Equal(t, 0.01, cfg.Decision.Base)
		require.Equal(t, 12, cfg.Decision.MaxSlowConcurrency)
		require.Equal(t, "lmetric", cfg.Pools.Slow.Policy.Name)
		require.Equal(t, policy.LMetricSticky, policy.SectionOf[policy.LMetricConfig](cfg.Pools.Slow.Policy, "lmetric").Variant)
		require.Len(t, cfg.Pools.Slow.Replicas, 2)
		require.Equal(t, "a-1", cfg.Pools.Slow.Replicas[1].ID)
		require.True(t, cfg.Fleet.Enabled)
		require.Equal(t, "gw-2", cfg.Fleet.GatewayID)
		require.Equal(t, m.Affinity, cfg.Fleet.Affinity.Enabled)
	}
}

// A gateway that refuses connections leaves the rotation and its requests go to the next
// one; an answer that started is never sent again.
func TestBalancerReroutesConnectionFailures(t *testing.T) {
	live := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "data: {}\n\ndata: [DONE]\n\n") }))
	defer live.Close()
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	cut := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "data: {}\n\n")
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // the gateway died mid-stream
	}))
	defer cut.Close()
	b := &balancer{urls: []string{dead.URL, live.URL}, addrs: []string{dead.Listener.Addr().String(), live.Listener.Addr().String()}, down: make([]atomic.Bool, 2)}
	c := &http.Client{Timeout: 5 * time.Second}
	for range 4 {
		a := b.send(context.Background(), c, "/", nil, http.Header{}, true)
		require.True(t, a.ok(), a.err)
	}
	require.True(t, b.down[0].Load())
	require.Equal(t, int64(1), b.rerouted.Load(), "the dead gateway was tried once")

	b = &balancer{urls: []string{cut.URL}, addrs: []string{cut.Listener.Addr().String()}, down: make([]atomic.Bool, 1)}
	a := b.send(context.Background(), c, "/", nil, http.Header{}, true)
	require.False(t, a.ok())
	require.True(t, a.streaming, "cut after the answer started")
	require.Zero(t, b.rerouted.Load())
}

func TestDrillAnalyze(t *testing.T) {
	poll := func(at float64, grants, gateways, up, live int) slowPoll {
		return slowPoll{At: at, Active: min(grants, 12), Grants: grants, Gateways: gateways, Up: up, Live: live}
	}
	kill := drillResult{Drill: drillKill, Gateways: 3, MaxSlow: 12, FaultAt: 1, Polls: []slowPoll{
		poll(0.5, 12, 3, 3, 3), poll(1.1, 8, 3, 2, 2), poll(2, 8, 3, 2, 2), poll(6.2, 8, 2, 2, 2), poll(6.4, 12, 2, 2, 2), poll(7, 12, 2, 2, 2),
		poll(9, 0, 2, 2, 2), // the wind-down, after the load
	}}
	kill.analyze(8 * time.Second)
	require.InDelta(t, 5.2, kill.ReapedS, 1e-9)
	require.InDelta(t, 5.4, kill.WholeS, 1e-9)
	require.Equal(t, 8, kill.MinGrants)
	require.Equal(t, 12, kill.MaxActive)

	redis := drillResult{Drill: drillRedis, Gateways: 3, MaxSlow: 12, FaultAt: 1, RestartAt: 2, Polls: []slowPoll{
		poll(0.5, 12, 3, 3, 3), poll(1.2, 12, 3, 3, 3), poll(1.3, 12, 3, 0, 3), poll(2.1, 12, 3, 1, 3), poll(2.4, 12, 3, 3, 3),
	}}
	redis.analyze(3 * time.Second)
	require.InDelta(t, 0.3, redis.FallbackS, 1e-9)
	require.InDelta(t, 0.4, redis.RejoinS, 1e-9)
	require.Zero(t, redis.WholeS, "the grants never fell short")
}

func TestMedian(t *testing.T) {
	require.True(t, math.IsNaN(median(nil)))
	require.Equal(t, 2.0, median([]float64{3, 1, 2}))
	require.Equal(t, 2.5, median([]float64{4, 1, 2, 3}))
	r := &FleetReport{Affinity: []traceResult{
		{Policy: "p", Mode: fleetMode{Name: "m"}, HitRate: 0.8, TTFT: stats.Summary{Mean: 70}},
		{Policy: "p", Mode: fleetMode{Name: "m"}, HitRate: 0.9, TTFT: stats.Summary{Mean: 300}}, // a stalled run
		{Policy: "p", Mode: fleetMode{Name: "m"}, HitRate: 0.85, TTFT: stats.Summary{Mean: 75}},
		{Policy: "p", Mode: fleetMode{Name: "other"}, HitRate: 0.1, TTFT: stats.Summary{Mean: 1}},
	}}
	hit, ttft := r.affinityMedians("p", "m")
	require.Equal(t, 0.85, hit)
	require.Equal(t, 75.0, ttft)
}

func TestWindows(t *testing.T) {
	w := windows([]slowPoll{{At: 0.1, Active: 5, Grants: 12, Live: 3, Up: 3}, {At: 0.4, Active: 9, Grants: 12, Live: 3, Up: 3},
		{At: 0.6, Active: 4, Grants: 8, Live: 2, Up: 2}, {At: 1.7, Active: 7, Grants: 12, Live: 2, Up: 2}})
	require.Equal(t, []window{{From: 0, MinActive: 5, MaxActive: 9, Grants: 12, Live: 3, Up: 3},
		{From: 0.5, MinActive: 4, MaxActive: 4, Grants: 8, Live: 2, Up: 2}, {From: 1.5, MinActive: 7, MaxActive: 7, Grants: 12, Live: 2, Up: 2}}, w)
}
