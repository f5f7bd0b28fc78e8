package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/batcher"
	"github.com/triage-gw/triage/classifier"
	"github.com/triage-gw/triage/decision"
	"github.com/triage-gw/triage/router"
	"github.com/triage-gw/triage/sim"
	"github.com/triage-gw/triage/upstream"
)

const testToken = "test-admin-token-0123456789"

// fakeModel is a hand-written Model. By default P(slow) comes from a "p=0.87" word in the
// text (0.1 without one), so a test picks each text's probability in the text itself.
type fakeModel struct {
	version string
	cutoff  float64 // 0: 0.5
	// classify, when set, replaces the default scoring.
	classify func(ctx context.Context, texts []string) ([]classifier.Result, error)

	calls  atomic.Int64 // Classify calls, the startup probe included
	closed atomic.Bool
	mu     sync.Mutex
	texts  []string // every text classified, in order
}

func newFakeModel(version string) *fakeModel { return &fakeModel{version: version} }

func (m *fakeModel) Classify(ctx context.Context, texts []string) ([]classifier.Result, error) {
	if m.closed.Load() {
		return nil, classifier.ErrClosed
	}
	m.calls.Add(1)
	m.mu.Lock()
	m.texts = append(m.texts, texts...)
	m.mu.Unlock()
	if m.classify != nil {
		return m.classify(ctx, texts)
	}
	return scoreTexts(texts), nil
}

func (m *fakeModel) Version() string { return m.version }

// LabelThreshold is the fake's boundary: 0.5 unless cutoff is set.
func (m *fakeModel) LabelThreshold() float64 {
	if m.cutoff != 0 {
		return m.cutoff
	}
	return 0.5
}

func (m *fakeModel) Close() error {
	if m.closed.Swap(true) {
		panic("fakeModel closed twice")
	}
	return nil
}

func (m *fakeModel) seen() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.texts...)
}

// scoreTexts is the fake's default scoring.
func scoreTexts(texts []string) []classifier.Result {
	out := make([]classifier.Result, len(texts))
	for i, t := range texts {
		p := float32(0.1)
		for w := range strings.FieldsSeq(t) {
			if v, ok := strings.CutPrefix(w, "p="); ok {
				if f, err := strconv.ParseFloat(v, 32); err == nil {
					p = float32(f)
				}
			}
		}
		label := classifier.FastLabel
		if p > 0.5 {
			label = classifier.SlowLabel
		}
		out[i] = classifier.Result{PSlow: p, Label: label, Tokens: len(strings.Fields(t)) + 2}
	}
	return out
}

// fakeUpstream is a replica: /health answers 200, the generation endpoints call onGenerate
// (default: a small chat completion naming the requested model). Every generation request
// is recorded.
type fakeUpstream struct {
	srv        *httptest.Server
	onGenerate func(w http.ResponseWriter, r *http.Request, body []byte)

	mu   sync.Mutex
	reqs []recorded
}

type recorded struct {
	path   string
	header http.Header
	body   map[string]any
}

func newFakeUpstream(t testing.TB) *fakeUpstream {
	u := &fakeUpstream{}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
			w.Write([]byte("ok"))
			return
		case "/v1/chat/completions", "/v1/completions", "/v1/messages", "/v1/responses":
		default:
			http.NotFound(w, r)
			return
		}
		body, _ := io.ReadAll(r.Body)
		var m map[string]any
		_ = json.Unmarshal(body, &m)
		u.mu.Lock()
		u.reqs = append(u.reqs, recorded{path: r.URL.Path, header: r.Header.Clone(), body: m})
		u.mu.Unlock()
		if u.onGenerate != nil {
			u.onGenerate(w, r, body)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		model, _ := m["model"].(string)
		json.NewEncoder(w).Encode(map[string]any{
			"object": "chat.completion", "model": model,
			"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": "ok"}, "finish_reason": "stop"}},
			"usage":   map[string]any{"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
		})
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *fakeUpstream) requests() []recorded {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]recorded(nil), u.reqs...)
}

// gate holds upstream requests until the test opens it, and announces each arrival.
type gate struct {
	arrived chan struct{}
	open    chan struct{}
	once    sync.Once
}

func newGate() *gate { return &gate{arrived: make(chan struct{}, 64), open: make(chan struct{})} }

func (g *gate) release() { g.once.Do(func() { close(g.open) }) }

// wait blocks the request until release (or the request is cancelled).
func (g *gate) wait(r *http.Request) bool {
	g.arrived <- struct{}{}
	select {
	case <-g.open:
		return true
	case <-r.Context().Done():
		return false
	}
}

// awaitArrivals waits for n requests to reach the gate.
func (g *gate) awaitArrivals(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case <-g.arrived:
		case <-time.After(10 * time.Second):
			t.Fatal("timed out waiting for a request to reach the upstream")
		}
	}
}

// gatewayConfig is the sections a test gateway is built from, spelled as in the config
// package's Config (which imports this package, so tests here cannot use it).
type gatewayConfig struct {
	Server   HTTPConfig
	Admin    AdminConfig
	Auth     AuthConfig
	Sim      struct{ Enabled bool }
	Pools    struct{ Fast, Slow upstream.PoolConfig }
	Cache    router.CacheConfig
	Cascade  router.CascadeConfig
	Batcher  batcher.Config
	Decision decision.Config
	Routing  router.RoutingConfig
}

func (c gatewayConfig) http() Config {
	return Config{HTTP: c.Server, Admin: c.Admin, Auth: c.Auth, Simulated: c.Sim.Enabled}
}

func (c gatewayConfig) router() router.Config {
	return router.Config{Cache: c.Cache, Cascade: c.Cascade, Batcher: c.Batcher, Decision: c.Decision, Routing: c.Routing}
}

// testConfig points the pools at the given upstreams with background checks off.
func testConfig(fast, slow []string) gatewayConfig {
	cfg := gatewayConfig{Server: DefaultHTTPConfig(), Auth: DefaultAuthConfig(),
		Cache: router.DefaultCacheConfig(), Cascade: router.DefaultCascadeConfig(), Batcher: batcher.DefaultConfig(),
		Decision: decision.DefaultConfig(), Routing: router.DefaultRoutingConfig()}
	cfg.Pools.Fast, cfg.Pools.Slow = upstream.DefaultPoolConfig(), upstream.DefaultPoolConfig()
	cfg.Pools.Fast.Name, cfg.Pools.Slow.Name = "fast", "slow"
	cfg.Server.ShutdownTimeout = 5 * time.Second
	cfg.Server.RequestTimeout = 10 * time.Second
	cfg.Admin.Token = testToken
	for _, p := range []struct {
		pc   *upstream.PoolConfig
		urls []string
	}{{&cfg.Pools.Fast, fast}, {&cfg.Pools.Slow, slow}} {
		p.pc.HealthCheck.Interval = 0
		p.pc.ScrapeInterval = 0
		p.pc.Timeouts.FirstByte = upstream.Duration(5 * time.Second) // below the request timeout
		p.pc.Model = "model-" + p.pc.Name
		for i, u := range p.urls {
			p.pc.Replicas = append(p.pc.Replicas, upstream.ReplicaConfig{URL: u, ID: p.pc.Name + "-" + strconv.Itoa(i)})
		}
	}
	return cfg
}

// testServer is a running Server on a real listener.
type testServer struct {
	*Server
	url   string
	model *fakeModel
	fast  *fakeUpstream
	slow  *fakeUpstream
	stop  func() error // cancels Run and returns its error
}

// testOptions are what a test may change besides the config.
type testOptions struct {
	load router.Loader
	// goneEvery replaces the client-gone watcher's interval; 0 keeps goneEvery. A test that
	// scans by hand (s.gone.scan) sets it long.
	goneEvery time.Duration
	shared    SharedResponses
}

type serverOption func(*gatewayConfig, *testOptions)

// startServer runs a server over two fake upstreams (one replica each) and a fake model.
func startServer(t testing.TB, opts ...serverOption) *testServer {
	t.Helper()
	fast, slow := newFakeUpstream(t), newFakeUpstream(t)
	cfg := testConfig([]string{fast.srv.URL}, []string{slow.srv.URL})
	ts := &testServer{model: newFakeModel("v1"), fast: fast, slow: slow}
	o := testOptions{load: func() (router.Model, error) { return ts.model, nil }}
	for _, opt := range opts {
		opt(&cfg, &o)
	}
	ts.Server, ts.url, ts.stop = run(t, cfg, o)
	return ts
}

// build wires the parts as cmd/triage does: the pools, the router, the server, on one
// registry.
func build(cfg gatewayConfig, o testOptions, ln net.Listener) (*Server, error) {
	log := slog.New(slog.DiscardHandler)
	reg := prometheus.NewRegistry()
	popts := upstream.Options{Logger: log, Registerer: reg, BaselinePrices: cfg.Pools.Slow.Prices}
	fast, err := upstream.New(cfg.Pools.Fast, popts)
	if err != nil {
		return nil, err
	}
	slow, err := upstream.New(cfg.Pools.Slow, popts)
	if err != nil {
		return nil, err
	}
	rt, err := router.New(cfg.router(), router.Options{Load: o.load, Fast: fast, Slow: slow, Logger: log, Registerer: reg})
	if err != nil {
		return nil, err
	}
	s, err := New(cfg.http(), Options{Router: rt, Logger: log, Registry: reg, Listener: ln, SharedResponses: o.shared})
	if err != nil {
		rt.Close()
	}
	return s, err
}

// runAll runs s with the parts it serves as cmd/triage's lifecycle does: the pools, the
// router and the key reloader first, the server last; when ctx ends the server drains
// before the others stop.
func runAll(ctx context.Context, s *Server) error {
	core, stopCore := context.WithCancel(context.WithoutCancel(ctx))
	defer stopCore()
	errs := make(chan error, 4)
	var wg sync.WaitGroup
	for _, part := range []func(context.Context) error{s.fast.Run, s.slow.Run, s.router.Run, s.RunKeys} {
		wg.Go(func() { errs <- part(core) })
	}
	err := s.Run(ctx)
	stopCore()
	wg.Wait()
	close(errs)
	for e := range errs {
		err = errors.Join(err, e)
	}
	return err
}

// run starts cfg on a fresh 127.0.0.1:0 listener.
func run(t testing.TB, cfg gatewayConfig, o testOptions) (*Server, string, func() error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s, err := build(cfg, o, ln)
	if err != nil {
		ln.Close()
		require.NoError(t, err)
	}
	if o.goneEvery > 0 {
		s.gone.every = o.goneEvery
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runAll(ctx, s) }()
	var once sync.Once
	var runErr error
	stop := func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(30 * time.Second):
				t.Error("Run did not return after cancel")
			}
		})
		return runErr
	}
	t.Cleanup(func() { require.NoError(t, stop()) })
	return s, "http://" + ln.Addr().String(), stop
}

// do sends a request and returns the response with its body read.
func do(t *testing.T, method, url, contentType string, body []byte, header ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	require.NoError(t, err)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, b
}

func postJSON(t *testing.T, url, body string, header ...string) (*http.Response, []byte) {
	t.Helper()
	return do(t, http.MethodPost, url, "application/json", []byte(body), header...)
}

// apiErr decodes an OpenAI error body, failing the test if it is not one.
func apiErr(t *testing.T, body []byte) errorDetail {
	t.Helper()
	var e struct {
		Error *errorDetail `json:"error"`
	}
	require.NoError(t, json.Unmarshal(body, &e), "error body must be JSON: %s", body)
	require.NotNil(t, e.Error, "error body must have an error object: %s", body)
	require.NotEmpty(t, e.Error.Message)
	require.NotEmpty(t, e.Error.Type)
	return *e.Error
}

// eventually polls cond; for state with no event to wait on (semaphore counts, queue depth).
func eventually(t *testing.T, cond func() bool, msg string) {
	t.Helper()
	require.Eventually(t, cond, 10*time.Second, time.Millisecond, msg)
}

// simUpstream serves a sim replica with no delays.
func simUpstream(t *testing.T, name, model string) string {
	t.Helper()
	c := sim.FastPreset()
	c.Name, c.Model = name, model
	c.TTFTBase, c.PrefillPerToken, c.DecodePerToken, c.Jitter = 0, 0, 0, 0
	s, err := sim.New(c, sim.Options{})
	require.NoError(t, err)
	hs := httptest.NewServer(s)
	t.Cleanup(hs.Close)
	return hs.URL
}

// tryPostJSON posts without a *testing.T, for use from other goroutines.
func tryPostJSON(url, body string) (*http.Response, []byte, error) {
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}
