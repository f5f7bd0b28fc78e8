package router

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/batcher"
	"github.com/triage-gw/triage/classifier"
	"github.com/triage-gw/triage/decision"
	"github.com/triage-gw/triage/upstream"
)

// fakeModel scores a text by its "p=0.87" word (0.1 without one); cutoff is its label
// threshold. classify, when set, replaces the scoring.
type fakeModel struct {
	version  string
	cutoff   float64
	classify func(ctx context.Context, texts []string) ([]classifier.Result, error)
	calls    atomic.Int64
	closed   atomic.Bool
}

func (m *fakeModel) Classify(ctx context.Context, texts []string) ([]classifier.Result, error) {
	m.calls.Add(1)
	if m.classify != nil {
		return m.classify(ctx, texts)
	}
	return scoreTexts(texts, m.cutoff), nil
}

func (m *fakeModel) Version() string         { return m.version }
func (m *fakeModel) LabelThreshold() float64 { return m.cutoff }
func (m *fakeModel) Close() error {
	if m.closed.Swap(true) {
		panic("closed twice")
	}
	return nil
}

func scoreTexts(texts []string, cutoff float64) []classifier.Result {
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
		out[i] = classifier.Result{PSlow: p, Tokens: len(strings.Fields(t)) + 2}
		if float64(p) > cutoff {
			out[i].Label = classifier.SlowLabel
		}
	}
	return out
}

// testPool is a pool over one replica that answers /health.
func testPool(t *testing.T, name string) *upstream.Pool {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(srv.Close)
	cfg := upstream.DefaultPoolConfig()
	cfg.Name = name
	cfg.HealthCheck.Interval = 0
	cfg.ScrapeInterval = 0
	cfg.Replicas = []upstream.ReplicaConfig{{URL: srv.URL, ID: name + "-0"}}
	p, err := upstream.New(cfg, upstream.Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	return p
}

func testConfig() Config {
	return Config{Cache: DefaultCacheConfig(), Cascade: DefaultCascadeConfig(), Batcher: batcher.DefaultConfig(), Decision: decision.DefaultConfig(), Routing: DefaultRoutingConfig()}
}

// startRouter runs a router over m until the test ends.
func startRouter(t *testing.T, cfg Config, m Model) *Router {
	t.Helper()
	r, err := New(cfg, Options{
		Load: func() (Model, error) { return m, nil },
		Fast: testPool(t, "fast"), Slow: testPool(t, "slow"),
		Logger: slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	return r
}

func TestOneUnreadableTextFailsOnlyItself(t *testing.T) {
	m := &fakeModel{version: "v1", cutoff: 0.5}
	m.classify = func(_ context.Context, texts []string) ([]classifier.Result, error) {
		for i, s := range texts {
			if strings.Contains(s, "poison") {
				return nil, &classifier.TextError{Index: i, Err: classifier.ErrEmptyText}
			}
		}
		return scoreTexts(texts, 0.5), nil
	}
	r := startRouter(t, testConfig(), m)
	res, err := r.runBatch(context.Background(), []string{"fine p=0.9", "poison", "also fine"})
	require.NoError(t, err)
	require.NoError(t, res[0].err)
	require.InDelta(t, 0.9, res[0].res.PSlow, 1e-6)
	var ue *UnclassifiableError
	require.ErrorAs(t, res[1].err, &ue)
	require.ErrorIs(t, res[1].err, classifier.ErrEmptyText)
	require.NoError(t, res[2].err)
	require.Equal(t, 0.5, res[2].cutoff, "each result carries the cutoff of the model that made it")
}

// The label boundary has one source, the model: a model whose threshold is 0.6 calls 0.55
// fast on a miss and on a hit, and the decision's reason agrees.
func TestTheModelsThresholdIsTheOnlyLabelBoundary(t *testing.T) {
	cfg := testConfig()
	cfg.Decision.Base = 0.6
	cfg.Decision.Alpha = 0.35
	r := startRouter(t, cfg, &fakeModel{version: "v1", cutoff: 0.6})
	for _, tc := range []struct {
		text   string
		label  int
		reason decision.Reason
	}{
		{"p=0.55 between the two boundaries", 0, decision.ReasonFastModel},
		{"p=0.65 above both", 1, decision.ReasonSlowGranted},
	} {
		for _, want := range []string{"miss", "hit"} {
			rt, err := r.Preview(context.Background(), tc.text)
			require.NoError(t, err)
			require.Equal(t, want, rt.CacheResult())
			require.Equal(t, 0.6, rt.Cutoff)
			require.Equal(t, tc.label, rt.ModelLabel(), "%s (%s)", tc.text, want)
			require.Equal(t, tc.label, rt.Label(), "%s (%s)", tc.text, want)
			require.Equal(t, tc.reason, rt.Reason, "%s (%s)", tc.text, want)
			r.WaitCache()
		}
	}
}

func TestRouteHoldsTheSlowSlotUntilReleasePreviewNever(t *testing.T) {
	cfg := testConfig()
	cfg.Decision.MaxSlowConcurrency = 1
	r := startRouter(t, cfg, &fakeModel{version: "v1", cutoff: 0.5})
	ctx := context.Background()

	first, err := r.Route(ctx, "p=0.99 one")
	require.NoError(t, err)
	require.True(t, first.Slow)
	require.Equal(t, "slow", first.Pool.Name())
	require.Equal(t, 1, r.State().SlowActive)

	p, err := r.Preview(ctx, "p=0.99 two")
	require.NoError(t, err)
	require.False(t, p.Slow)
	require.Equal(t, decision.ReasonSlowSaturated, p.Reason, "a preview looks at the budget")
	require.Equal(t, 1, r.State().SlowActive, "and takes nothing")

	second, err := r.Route(ctx, "p=0.99 three")
	require.NoError(t, err)
	require.False(t, second.Slow)
	require.Equal(t, "fast", second.Pool.Name())
	second.Release() // a fast route holds nothing; Release is a no-op

	first.Release()
	first.Release() // idempotent
	require.Zero(t, r.State().SlowActive)
}

// A budget other than the local semaphore (the fleet's) is used as given.
func TestInjectedBudgetIsUsed(t *testing.T) {
	b := &countingSlots{max: 2}
	m := &fakeModel{version: "v1", cutoff: 0.5}
	r, err := New(testConfig(), Options{
		Load: func() (Model, error) { return m, nil }, Slots: b,
		Fast: testPool(t, "fast"), Slow: testPool(t, "slow"), Logger: slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { r.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()
	rt, err := r.Route(ctx, "p=0.9 x")
	require.NoError(t, err)
	require.True(t, rt.Slow)
	require.EqualValues(t, 1, b.acquired.Load())
	require.Equal(t, 0.5, r.State().Load())
	rt.Release()
	require.EqualValues(t, 1, b.released.Load())
}

type countingSlots struct {
	max                int
	acquired, released atomic.Int64
}

func (b *countingSlots) TryAcquire() bool { b.acquired.Add(1); return true }
func (b *countingSlots) Release()         { b.released.Add(1) }
func (b *countingSlots) Active() int      { return int(b.acquired.Load() - b.released.Load()) }
func (b *countingSlots) Max() int         { return b.max }

func TestNewRefusesABrokenModelAndClosesIt(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    *fakeModel
		want string
	}{
		{"no results", &fakeModel{version: "v", cutoff: 0.5, classify: func(context.Context, []string) ([]classifier.Result, error) { return nil, nil }}, "returned 0 results"},
		{"bad threshold", &fakeModel{version: "v", cutoff: 1}, "label threshold 1, outside (0, 1)"},
		{"no version", &fakeModel{cutoff: 0.5}, "empty version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(testConfig(), Options{Load: func() (Model, error) { return tc.m, nil }, Fast: testPool(t, "f"), Slow: testPool(t, "s")})
			require.ErrorContains(t, err, tc.want)
			require.True(t, tc.m.closed.Load())
		})
	}
	_, err := New(testConfig(), Options{Load: func() (Model, error) { return nil, errors.New("no such file") }, Fast: testPool(t, "f"), Slow: testPool(t, "s")})
	require.ErrorContains(t, err, "no such file")
}

func TestClosedRouterRefusesWork(t *testing.T) {
	m := &fakeModel{version: "v1", cutoff: 0.5}
	r, err := New(testConfig(), Options{Load: func() (Model, error) { return m, nil }, Fast: testPool(t, "f"), Slow: testPool(t, "s")})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.NoError(t, r.Run(ctx))
	require.True(t, m.closed.Load())
	require.Equal(t, "", r.Version())
	_, err = r.Route(context.Background(), "x")
	require.ErrorIs(t, err, ErrNoModel)
	_, err = r.Reload(context.Background())
	require.ErrorIs(t, err, ErrClosed, "no model is loaded once closed")
	require.Equal(t, 0.5, r.Threshold(), "gauges still read during shutdown")
}

// filteredModel is a fakeModel trained behind the noise filter; it records what it was given.
type filteredModel struct {
	fakeModel
	filter string
	mu     sync.Mutex
	seen   []string
}

func (m *filteredModel) TextFilter() string { return m.filter }

func (m *filteredModel) Classify(ctx context.Context, texts []string) ([]classifier.Result, error) {
	m.mu.Lock()
	m.seen = append(m.seen, texts...)
	m.mu.Unlock()
	return m.fakeModel.Classify(ctx, texts)
}

var _ Filtered = (*filteredModel)(nil)

// A model trained behind the noise filter is given the instruction without its noise words,
// so the same instruction with another ticket number or reference tag is one cache entry;
// the context is kept; a model gets the filter version its manifest names, and a model that
// names no filter gets the text as Input built it.
func TestTheNoiseFilterFollowsTheModel(t *testing.T) {
	ctx := context.Background()
	t.Run("filtered", func(t *testing.T) {
		m := &filteredModel{fakeModel: fakeModel{version: "v1", cutoff: 0.5}, filter: classifier.NoiseFilter}
		r := startRouter(t, testConfig(), m)
		m.mu.Lock()
		m.seen = nil // the startup probe
		m.mu.Unlock()
		for i, text := range []string{
			Input("Write a poem about the sea #4821", ""),
			Input("Write a poem about the sea (ref r1-false-c1-3fa9b2c1-8e2d-123)", ""),
			Input("[build 3fa9b2c] Write a poem about the sea https://example.com/a?id=7", ""),
		} {
			rt, err := r.Preview(ctx, text)
			require.NoError(t, err)
			require.Equal(t, map[bool]string{true: "miss", false: "hit"}[i == 0], rt.CacheResult(), text)
			r.WaitCache()
		}
		_, err := r.Preview(ctx, Input("Summarize #12", "In 1969, 3 astronauts flew."))
		require.NoError(t, err)
		m.mu.Lock()
		defer m.mu.Unlock()
		require.Equal(t, []string{"Write a poem about the sea", "Summarize [SEP] In 1969, 3 astronauts flew."}, m.seen)
	})
	t.Run("the version the model names", func(t *testing.T) {
		for name, want := range map[string]string{
			classifier.NoiseFilter:   "Why is the sky blue?",
			classifier.NoiseFilterV1: "Why is the sky blue? order",
		} {
			m := &filteredModel{fakeModel: fakeModel{version: "v1", cutoff: 0.5}, filter: name}
			r := startRouter(t, testConfig(), m)
			m.mu.Lock()
			m.seen = nil // the startup probe
			m.mu.Unlock()
			_, err := r.Preview(ctx, Input("Why is the sky blue? order 123456789", ""))
			require.NoError(t, err)
			m.mu.Lock()
			require.Equal(t, []string{want}, m.seen, name)
			m.mu.Unlock()
		}
	})
	t.Run("no filter named", func(t *testing.T) {
		m := &filteredModel{fakeModel: fakeModel{version: "v1", cutoff: 0.5}}
		r := startRouter(t, testConfig(), m)
		m.mu.Lock()
		m.seen = nil // the startup probe
		m.mu.Unlock()
		rt, err := r.Preview(ctx, "p=0.9 write #1")
		require.NoError(t, err)
		require.InDelta(t, 0.9, rt.PSlow, 1e-6, "the p=0.9 word reached the model")
		m.mu.Lock()
		defer m.mu.Unlock()
		require.Equal(t, []string{"p=0.9 write #1"}, m.seen)
	})
}
