package upstream

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestCheckOnce(t *testing.T) {
	var status atomic.Int32
	status.Store(http.StatusOK)
	var probes atomic.Int32
	srv := replicaServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz-custom" || r.Header.Get("Authorization") != "Bearer k" {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		probes.Add(1)
		w.WriteHeader(int(status.Load()))
	})
	cfg := testConfig(srv.URL, deadURL(t))
	cfg.Replicas[0].Headers = map[string]string{"Authorization": "Bearer k"}
	cfg.HealthCheck = HealthCheckConfig{
		Path: "/healthz-custom", Interval: Duration(time.Second), Timeout: Duration(time.Second),
		UnhealthyAfter: 2, HealthyAfter: 2,
	}
	f := newFixture(t, cfg, preferring("r0"), nil)
	p, ctx := f.pool, context.Background()
	state := func(i int) HealthState { return p.Replicas()[i].State }
	healthy := func(id string) float64 {
		return f.metric(t, "triage_upstream_replica_healthy", map[string]string{"replica": id})
	}

	p.checkOnce(ctx)
	require.EqualValues(t, 1, probes.Load())
	require.Equal(t, StateHealthy, state(0))
	require.Equal(t, StateHealthy, state(1), "one failure is below unhealthy_after")

	p.checkOnce(ctx)
	require.Equal(t, StateUnhealthy, state(1), "the dead replica fails twice")
	require.Equal(t, 0.0, healthy("r1"))

	status.Store(http.StatusServiceUnavailable)
	p.checkOnce(ctx)
	require.Equal(t, StateHealthy, state(0))
	p.checkOnce(ctx)
	require.Equal(t, StateUnhealthy, state(0))
	require.Equal(t, 0.0, healthy("r0"))
	require.False(t, p.Healthy())
	_, err := p.Do(ctx, &ForwardRequest{Path: "/"})
	require.ErrorIs(t, err, ErrNoHealthyReplica)

	status.Store(http.StatusNoContent)
	p.checkOnce(ctx)
	require.Equal(t, StateUnhealthy, state(0), "one pass is below healthy_after")
	p.checkOnce(ctx)
	require.Equal(t, StateHealthy, state(0))
	require.Equal(t, 1.0, healthy("r0"))
	require.True(t, p.Healthy())
}

func TestCheckOnceTimesOut(t *testing.T) {
	srv := replicaServer(t, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	cfg := testConfig(srv.URL)
	cfg.HealthCheck.Timeout = Duration(20 * time.Millisecond)
	cfg.HealthCheck.Interval = Duration(time.Second)
	cfg.HealthCheck.UnhealthyAfter = 1
	f := newFixture(t, cfg, &stubPicker{}, nil)
	f.pool.checkOnce(context.Background())
	require.Equal(t, StateUnhealthy, f.pool.Replicas()[0].State)
}

func TestCheckOnceIgnoresShutdown(t *testing.T) {
	srv := replicaServer(t, func(w http.ResponseWriter, r *http.Request) {})
	cfg := testConfig(srv.URL)
	cfg.HealthCheck.Interval = Duration(time.Second)
	cfg.HealthCheck.UnhealthyAfter = 1
	f := newFixture(t, cfg, &stubPicker{}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f.pool.checkOnce(ctx)
	require.Equal(t, StateHealthy, f.pool.Replicas()[0].State, "a probe cut short by shutdown is not a failure")
}
