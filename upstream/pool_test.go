package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/internal/testnet"
	"github.com/triage-gw/triage/upstream/policy"
)

// stubPicker is a Picker and Finisher whose behaviour is set per test.
type stubPicker struct {
	pick func(req *policy.Request, cands []policy.Candidate) int // nil: index 0
	done func(req *policy.Request, replicaID string, outputTokens int)
}

func (s *stubPicker) Pick(req *policy.Request, cands []policy.Candidate) int {
	if s.pick == nil {
		return 0
	}
	return s.pick(req, cands)
}

func (s *stubPicker) Done(req *policy.Request, replicaID string, outputTokens int) {
	if s.done != nil {
		s.done(req, replicaID, outputTokens)
	}
}

// preferring picks the first of ids present among the candidates.
func preferring(ids ...string) *stubPicker {
	return &stubPicker{pick: func(_ *policy.Request, cands []policy.Candidate) int {
		for _, id := range ids {
			for i, c := range cands {
				if c.ID == id {
					return i
				}
			}
		}
		return 0
	}}
}

type stubAdmitter struct {
	admit func(req *policy.Request) error
}

func (s stubAdmitter) Admit(req *policy.Request) error { return s.admit(req) }

// stepClock is a hand-driven clock for ejection cooldowns and freshness.
type stepClock struct {
	mu sync.Mutex
	t  time.Time
}

func newStepClock() *stepClock { return &stepClock{t: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *stepClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *stepClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// doneCall records one Finisher.Done.
type doneCall struct {
	replica string
	tokens  int
}

// doneLog collects Done calls from many goroutines.
type doneLog struct {
	mu    sync.Mutex
	calls []doneCall
}

func (d *doneLog) record(_ *policy.Request, id string, n int) {
	d.mu.Lock()
	d.calls = append(d.calls, doneCall{id, n})
	d.mu.Unlock()
}

func (d *doneLog) all() []doneCall {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]doneCall(nil), d.calls...)
}

// replicaServer starts a real HTTP server on 127.0.0.1:0.
func replicaServer(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// deadURL is an address where nothing listens: connecting is refused, for the whole test
// (the port stays reserved, so no parallel test's server can take it).
func deadURL(t *testing.T) string {
	t.Helper()
	return testnet.RefusedURL(t)
}

type poolFixture struct {
	pool  *Pool
	reg   *prometheus.Registry
	clock *stepClock
}

// testConfig is a valid config for the given replica URLs (IDs r0, r1, ...)
// with background loops off, so tests drive checkOnce and scrapeOnce.
func testConfig(urls ...string) PoolConfig {
	cfg := DefaultPoolConfig()
	cfg.Name = "test"
	cfg.Model = "pool-model"
	cfg.HealthCheck.Interval = 0
	cfg.ScrapeInterval = 0
	cfg.Timeouts.FirstByte = Duration(10 * time.Second)
	cfg.Timeouts.StreamIdle = Duration(10 * time.Second)
	for i, u := range urls {
		cfg.Replicas = append(cfg.Replicas, ReplicaConfig{URL: u, ID: fmt.Sprintf("r%d", i)})
	}
	return cfg
}

func newFixture(t *testing.T, cfg PoolConfig, picker policy.Picker, admitter Admitter) *poolFixture {
	t.Helper()
	f := &poolFixture{reg: prometheus.NewRegistry(), clock: newStepClock()}
	p, err := New(cfg, Options{
		Picker:     picker,
		Admitter:   admitter,
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		Registerer: f.reg,
		Now:        f.clock.now,
	})
	require.NoError(t, err)
	f.pool = p
	return f
}

// matchingSeries returns the samples of family name in reg whose labels include want.
func matchingSeries(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) []*dto.Metric {
	t.Helper()
	fams, err := reg.Gather()
	require.NoError(t, err)
	var out []*dto.Metric
	for _, mf := range fams {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for k, v := range want {
				if have[k] != v {
					continue series
				}
			}
			out = append(out, m)
		}
	}
	return out
}

// metric returns the value of the first sample of family name whose labels include want
// (gauge, counter, or histogram sample count), or 0.
func (f *poolFixture) metric(t *testing.T, name string, want map[string]string) float64 {
	t.Helper()
	for _, m := range matchingSeries(t, f.reg, name, want) {
		switch {
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue()
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue()
		case m.GetHistogram() != nil:
			return float64(m.GetHistogram().GetSampleCount())
		}
	}
	return 0
}

func (f *poolFixture) outcomes(t *testing.T, replica, outcome string) float64 {
	return f.metric(t, "triage_upstream_requests_total", map[string]string{"pool": "test", "replica": replica, "outcome": outcome})
}

func TestNewRejectsInvalidConfig(t *testing.T) {
	cfg := testConfig("http://127.0.0.1:1")
	cfg.Timeouts.Connect = 0
	_, err := New(cfg, Options{Picker: &stubPicker{}})
	require.ErrorContains(t, err, "timeouts.connect")

	cfg = testConfig("http://127.0.0.1:1")
	cfg.Policy.Name = "no-such-policy"
	_, err = New(cfg, Options{})
	require.ErrorContains(t, err, `pool.policy.name: unknown policy "no-such-policy"`)
}

func TestPoolsShareARegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	for _, name := range []string{"fast", "slow"} {
		cfg := testConfig("http://127.0.0.1:1")
		cfg.Name = name
		_, err := New(cfg, Options{Picker: &stubPicker{}, Registerer: reg})
		require.NoError(t, err)
	}
	fams, err := reg.Gather()
	require.NoError(t, err)
	pools := map[string]bool{}
	for _, mf := range fams {
		if mf.GetName() != "triage_upstream_replica_healthy" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "pool" {
					pools[lp.GetValue()] = true
				}
			}
		}
	}
	require.Equal(t, map[string]bool{"fast": true, "slow": true}, pools)
}

func TestReplicaDefaults(t *testing.T) {
	cfg := testConfig()
	cfg.Replicas = []ReplicaConfig{
		{URL: "http://user:secret@10.0.0.1:8000"},
		{URL: "http://10.0.0.2:8000/", ID: "b", Model: "own-model", Weight: 2.5},
	}
	f := newFixture(t, cfg, &stubPicker{}, nil)
	st := f.pool.Replicas()
	require.Len(t, st, 2)
	require.Equal(t, "test-0", st[0].ID, "ID defaults to <pool>-<index>, never the URL (clients see ids)")
	require.Equal(t, "http://user:xxxxx@10.0.0.1:8000", st[0].URL, "the admin status shows the redacted URL")
	require.Equal(t, "pool-model", st[0].Model)
	require.Equal(t, "Basic dXNlcjpzZWNyZXQ=", f.pool.byID[st[0].ID].headers["Authorization"], "URL credentials become Basic auth")
	require.Equal(t, 1.0, st[0].Weight)
	require.Equal(t, StateHealthy, st[0].State)
	require.Equal(t, "own-model", f.pool.Model("b"))
	require.Equal(t, 2.5, st[1].Weight)
	require.Equal(t, "", f.pool.Model("nope"))
	require.Equal(t, "test", f.pool.Name())
	require.Equal(t, "http://10.0.0.2:8000/v1/models", f.pool.byID["b"].endpoint("/v1/models"))
}

func TestDrainAndNoHealthyReplica(t *testing.T) {
	srv := replicaServer(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "{}") })
	f := newFixture(t, testConfig(srv.URL, srv.URL+"/"), &stubPicker{}, nil)
	p := f.pool

	require.ErrorIs(t, p.Drain("missing"), ErrUnknownReplica)
	require.NoError(t, p.Drain("r0"))
	require.True(t, p.Healthy())
	require.NoError(t, p.Drain("r1"))
	require.False(t, p.Healthy())
	require.Equal(t, StateDraining, p.Replicas()[0].State)
	require.Equal(t, 0.0, f.metric(t, "triage_upstream_replica_healthy", map[string]string{"replica": "r0"}))

	_, err := p.Do(context.Background(), &ForwardRequest{Method: "GET", Path: "/v1/models"})
	require.ErrorIs(t, err, ErrNoHealthyReplica)

	require.NoError(t, p.Undrain("r1"))
	resp, err := p.Do(context.Background(), &ForwardRequest{Method: "GET", Path: "/v1/models"})
	require.NoError(t, err)
	require.Equal(t, "r1", resp.ReplicaID)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, 1.0, f.metric(t, "triage_upstream_replica_healthy", map[string]string{"replica": "r1"}))
}

func TestTracerFollowsThePolicyConfig(t *testing.T) {
	srv := replicaServer(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "{}") })
	cfg := testConfig(srv.URL, srv.URL+"/")
	require.Nil(t, newFixture(t, cfg, nil, nil).pool.Tracer(), "tracing is off by default")
	require.Nil(t, newFixture(t, cfg, &stubPicker{}, nil).pool.Tracer(), "an injected picker without a tracer has none")

	cfg.Policy.Trace.Enabled = true
	cfg.Policy.Trace.Capacity = 4
	f := newFixture(t, cfg, nil, nil)
	tr := f.pool.Tracer()
	require.NotNil(t, tr)
	require.Equal(t, 4, tr.Capacity())
	for range 2 {
		resp, err := f.pool.Do(context.Background(), &ForwardRequest{Path: "/", Routing: policy.Request{Prompt: "hi"}})
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
	}
	recs := tr.Recent(10)
	require.Len(t, recs, 2)
	require.Equal(t, []string{"r0", "r1"}, []string{recs[0].Chosen.ID, recs[1].Chosen.ID}, "least-request rotates among the idle replicas")
	require.True(t, recs[0].LowerIsBetter)
}

func TestMaxInFlightPerReplica(t *testing.T) {
	srv := replicaServer(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "{}") })
	cfg := testConfig(srv.URL)
	cfg.MaxInFlightPerReplica = 1
	f := newFixture(t, cfg, &stubPicker{}, nil)
	ctx := context.Background()

	held, err := f.pool.Do(ctx, &ForwardRequest{Path: "/v1/models"})
	require.NoError(t, err)
	require.Equal(t, 1, f.pool.InFlight())

	_, err = f.pool.Do(ctx, &ForwardRequest{Path: "/v1/models"})
	require.ErrorIs(t, err, ErrNoHealthyReplica)
	require.ErrorContains(t, err, "max_in_flight_per_replica")
	require.True(t, f.pool.Healthy(), "a busy replica is not a broken one")

	require.NoError(t, held.Body.Close())
	require.Equal(t, 0, f.pool.InFlight())
	resp, err := f.pool.Do(ctx, &ForwardRequest{Path: "/v1/models"})
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
}

func TestTryAcquireIsExactUnderContention(t *testing.T) {
	r := &replica{}
	const limit, workers = 5, 64
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := 0
	for range workers {
		wg.Go(func() {
			if r.tryAcquire(limit) {
				mu.Lock()
				got++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Equal(t, limit, got)
	require.EqualValues(t, limit, r.inFlight.Load())
}

func TestPickerOutOfRangeIsAnError(t *testing.T) {
	srv := replicaServer(t, func(w http.ResponseWriter, r *http.Request) {})
	f := newFixture(t, testConfig(srv.URL), &stubPicker{pick: func(*policy.Request, []policy.Candidate) int { return 3 }}, nil)
	_, err := f.pool.Do(context.Background(), &ForwardRequest{Path: "/"})
	require.ErrorContains(t, err, "picker returned index 3")
	require.Equal(t, 0, f.pool.InFlight())
}

func TestAdmissionRejects(t *testing.T) {
	picked := false
	picker := &stubPicker{pick: func(*policy.Request, []policy.Candidate) int { picked = true; return 0 }}
	admitter := stubAdmitter{admit: func(req *policy.Request) error {
		if req.User == "greedy" {
			return ErrRejected
		}
		return nil
	}}
	srv := replicaServer(t, func(w http.ResponseWriter, r *http.Request) {})
	f := newFixture(t, testConfig(srv.URL), picker, admitter)

	_, err := f.pool.Do(context.Background(), &ForwardRequest{Path: "/", Routing: policy.Request{User: "greedy"}})
	require.ErrorIs(t, err, ErrRejected)
	require.False(t, picked)

	resp, err := f.pool.Do(context.Background(), &ForwardRequest{Path: "/", Routing: policy.Request{User: "modest"}})
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.True(t, picked)
}

func TestRunStopsWhenContextEnds(t *testing.T) {
	probed := make(chan struct{}, 1)
	scraped := make(chan struct{}, 1)
	srv := replicaServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
			select {
			case probed <- struct{}{}:
			default:
			}
		case "/metrics":
			io.WriteString(w, "vllm:num_requests_running 1\n")
			select {
			case scraped <- struct{}{}:
			default:
			}
		}
	})
	cfg := testConfig(srv.URL)
	cfg.HealthCheck.Interval = Duration(time.Hour) // the first round runs at once
	cfg.ScrapeInterval = Duration(time.Hour)
	f := newFixture(t, cfg, &stubPicker{}, nil)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.pool.Run(ctx) }()
	<-probed
	<-scraped
	require.ErrorContains(t, f.pool.Run(ctx), "Run called twice")
	cancel()
	require.NoError(t, <-done)
}

func TestBackgroundPanicIsRecovered(t *testing.T) {
	f := newFixture(t, testConfig("http://127.0.0.1:1"), &stubPicker{}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	f.pool.every(ctx, "test", time.Hour, func(context.Context) {
		calls++
		cancel()
		panic(errors.New("boom"))
	})
	require.Equal(t, 1, calls)
}

// TestPolicyEvictionsAreCounted: a pool whose policy drops entries keyed by client values
// (here vtc-basic's users, bounded to 4) counts them in
// triage_upstream_policy_evictions_total{pool,table}.
func TestPolicyEvictionsAreCounted(t *testing.T) {
	srv := replicaServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"usage":{"completion_tokens":1}}`)
	})
	cfg := testConfig(srv.URL)
	cfg.Policy.Name = "vtc-basic"
	vtc := policy.SectionOf[policy.VTCConfig](cfg.Policy, "vtc")
	vtc.MaxUsers = 4
	require.NoError(t, cfg.Policy.SetSection("vtc", vtc))
	f := newFixture(t, cfg, nil, nil)
	for i := range 20 {
		resp, err := f.pool.Do(context.Background(), &ForwardRequest{Method: http.MethodPost, Path: "/v1/completions",
			Body: []byte(`{}`), Routing: policy.Request{User: fmt.Sprintf("u%d", i), InputTokens: 3}})
		require.NoError(t, err)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	require.Positive(t, f.metric(t, "triage_upstream_policy_evictions_total", map[string]string{"pool": "test", "table": "users"}))
}
