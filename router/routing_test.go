package router

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/classifier"
	"github.com/triage-gw/triage/decision"
	"github.com/triage-gw/triage/upstream"
)

// heldModel classifies like fakeModel, except that a text containing "hold" blocks its batch
// until release; started announces each such batch.
type heldModel struct {
	fakeModel
	started chan struct{}
	open    chan struct{}
	once    sync.Once
}

func newHeldModel() *heldModel {
	m := &heldModel{fakeModel: fakeModel{version: "v1", cutoff: 0.5}, started: make(chan struct{}, 16), open: make(chan struct{})}
	m.classify = func(ctx context.Context, texts []string) ([]classifier.Result, error) {
		if slices.ContainsFunc(texts, func(s string) bool { return s == "hold" }) {
			m.started <- struct{}{}
			select {
			case <-m.open:
			case <-ctx.Done():
			}
		}
		return scoreTexts(texts, 0.5), nil
	}
	return m
}

func (m *heldModel) release() { m.once.Do(func() { close(m.open) }) }

// hold occupies the batcher's only worker with the text "hold" until m.release, and returns
// once that batch has started.
func hold(t *testing.T, r *Router, m *heldModel) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := r.Preview(context.Background(), "hold")
		done <- err
	}()
	t.Cleanup(func() {
		m.release()
		require.NoError(t, <-done)
	})
	select {
	case <-m.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the held batch did not start")
	}
}

func oneWorker(cfg Config) Config {
	cfg.Batcher.MaxBatch, cfg.Batcher.Workers, cfg.Batcher.QueueSize = 1, 1, 1
	cfg.Cascade.Enabled = false
	return cfg
}

// A request whose classification does not come within the budget goes to the fallback pool,
// and its classification, queued behind a busy batch and left by its only waiter, still runs
// and fills the cache: the next request with that text is decided by the model.
func TestBudgetSpentRoutesByFallbackAndTheClassificationStillFillsTheCache(t *testing.T) {
	for _, fb := range []string{FallbackFast, FallbackSlow} {
		t.Run(fb, func(t *testing.T) {
			cfg := oneWorker(testConfig())
			cfg.Routing.ClassifyBudget, cfg.Routing.Fallback = 20*time.Millisecond, fb
			m := newHeldModel()
			r := startRouter(t, cfg, m)
			hold(t, r, m)

			rt, err := r.Route(context.Background(), "queued p=0.9")
			require.NoError(t, err)
			require.Equal(t, decision.ReasonClassifierTimeout, rt.Reason)
			require.Equal(t, fb == FallbackSlow, rt.Slow)
			require.Equal(t, fb, rt.Pool.Name())
			require.False(t, rt.Classified(), "no score to report")
			require.GreaterOrEqual(t, rt.Queue, 20*time.Millisecond, "the time it waited is reported")
			if fb == FallbackSlow {
				require.Equal(t, 1, r.State().SlowActive, "a slow fallback holds a slot")
			}
			rt.Release()
			require.Equal(t, 0, r.State().SlowActive)

			m.release()
			require.Eventually(t, func() bool {
				r.WaitCache()
				_, ok := r.cache.get(r.models.peek().key, "queued p=0.9")
				return ok
			}, 10*time.Second, time.Millisecond, "the abandoned text is classified and cached")
			rt, err = r.Route(context.Background(), "queued p=0.9")
			require.NoError(t, err)
			require.True(t, rt.Hit)
			require.Equal(t, decision.ReasonSlowGranted, rt.Reason, "decided by the model this time")
			rt.Release()
		})
	}
}

func TestQueueFullRoutesByFallbackOrRejects(t *testing.T) {
	for _, tc := range []struct {
		fallback string
		slow     bool
		reason   decision.Reason
		err      error
	}{
		{FallbackFast, false, decision.ReasonClassifierBusy, nil},
		{FallbackSlow, true, decision.ReasonClassifierBusy, nil},
		{FallbackReject, false, "", ErrQueueFull},
	} {
		t.Run(tc.fallback, func(t *testing.T) {
			cfg := oneWorker(testConfig())
			cfg.Routing.Fallback = tc.fallback
			cfg.Routing.ClassifyBudget = time.Minute // the queue, not the budget, turns it away
			m := newHeldModel()
			r := startRouter(t, cfg, m)
			hold(t, r, m)
			// Fill the one queue slot with a text whose waiter stays (no budget).
			queued := make(chan error, 1)
			go func() {
				_, err := r.Preview(context.Background(), "second")
				queued <- err
			}()
			require.Eventually(t, func() bool { return r.State().QueueLen == 1 }, 10*time.Second, time.Millisecond)

			rt, err := r.Route(context.Background(), "third p=0.1")
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
			} else {
				require.NoError(t, err)
				require.Equal(t, tc.reason, rt.Reason)
				require.Equal(t, tc.slow, rt.Slow)
				rt.Release()
			}
			m.release()
			require.NoError(t, <-queued)
		})
	}
}

// A slow fallback needs a slot like any slow route; without one it is shed to fast.
func TestSlowFallbackWithoutASlotIsShedToFast(t *testing.T) {
	cfg := testConfig()
	cfg.Decision.MaxSlowConcurrency = 1
	cfg.Routing.Fallback = FallbackSlow
	m := &fakeModel{version: "v1", cutoff: 0.5}
	r := startRouter(t, cfg, m)
	m.classify = func(context.Context, []string) ([]classifier.Result, error) { return nil, errors.New("onnx failed") }
	first, err := r.Route(context.Background(), "a")
	require.NoError(t, err)
	require.Equal(t, decision.ReasonClassifierUnavailable, first.Reason)
	require.True(t, first.Slow)
	second, err := r.Route(context.Background(), "b")
	require.NoError(t, err)
	require.Equal(t, decision.ReasonSlowSaturated, second.Reason)
	require.False(t, second.Slow)
	first.Release()
}

func TestClassifierErrorsThatAreNotItsFaultAreReturned(t *testing.T) {
	cfg := testConfig()
	m := &fakeModel{version: "v1", cutoff: 0.5}
	r := startRouter(t, cfg, m)
	m.classify = func(_ context.Context, texts []string) ([]classifier.Result, error) {
		return nil, &classifier.TextError{Index: 0, Err: classifier.ErrEmptyText}
	}
	_, err := r.Route(context.Background(), "unreadable")
	var ue *UnclassifiableError
	require.ErrorAs(t, err, &ue, "a text the classifier refuses is the request's problem, not a fallback")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	m.classify = nil
	_, err = r.Route(ctx, "gone")
	require.ErrorIs(t, err, context.Canceled)
}

// modelPool is a pool over replicas serving the given models (the pool's own model first).
func modelPool(t *testing.T, name, poolModel string, replicaModels ...string) *upstream.Pool {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(srv.Close)
	cfg := upstream.DefaultPoolConfig()
	cfg.Name, cfg.Model = name, poolModel
	cfg.HealthCheck.Interval, cfg.ScrapeInterval = 0, 0
	cfg.Replicas = []upstream.ReplicaConfig{{URL: srv.URL}}
	for _, rm := range replicaModels {
		cfg.Replicas = append(cfg.Replicas, upstream.ReplicaConfig{URL: srv.URL, Model: rm})
	}
	p, err := upstream.New(cfg, upstream.Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	return p
}

func newNamedRouter(t *testing.T, cfg Config) *Router {
	t.Helper()
	m := &fakeModel{version: "v1", cutoff: 0.5}
	r, err := New(cfg, Options{
		Load: func() (Model, error) { return m, nil },
		Fast: modelPool(t, "fast", "small", "shared"),
		Slow: modelPool(t, "slow", "big", "shared", "big-2"),
	})
	require.NoError(t, err)
	t.Cleanup(r.Close)
	return r
}

func TestModelNamesRouteOrPin(t *testing.T) {
	cfg := testConfig()
	cfg.Routing.ModelAliases = []string{"auto", "router"}
	r := newNamedRouter(t, cfg)
	for model, want := range map[string]Target{
		"":        TargetRoute,
		"auto":    TargetRoute,
		"router":  TargetRoute,
		"shared":  TargetRoute, // both pools serve it
		"small":   TargetFast,
		"big":     TargetSlow,
		"big-2":   TargetSlow, // a replica's own model
		"Big":     TargetRoute,
		"unknown": TargetRoute, // unknown_model: route
	} {
		require.Equal(t, want, r.Target(model), "model %q", model)
	}
	require.Equal(t, []string{"auto", "router"}, r.Aliases())
	require.Equal(t, []ServedModel{{"small", "fast"}, {"shared", ""}, {"big", "slow"}, {"big-2", "slow"}}, r.Served())

	cfg.Routing.UnknownModel = UnknownModelReject
	r = newNamedRouter(t, cfg)
	require.Equal(t, TargetUnknown, r.Target("unknown"))
	require.Equal(t, TargetUnknown, r.Target("Big"), "names match exactly")
	require.Equal(t, TargetRoute, r.Target("shared"))
	require.Equal(t, TargetRoute, r.Target(""))
}

// A request pinned to slow holds a slot, so the load every decision sees counts it; with
// every slot taken it is refused rather than sent to a model it did not ask for.
func TestPinnedSlowHoldsASlotAndIsRefusedWhenSaturated(t *testing.T) {
	cfg := testConfig()
	cfg.Decision.MaxSlowConcurrency = 2
	r := startRouter(t, cfg, &fakeModel{version: "v1", cutoff: 0.5})
	a, err := r.Pin(true)
	require.NoError(t, err)
	require.Equal(t, decision.ReasonPinned, a.Reason)
	require.Equal(t, "slow", a.Pool.Name())
	require.Equal(t, 1, r.State().SlowActive)
	require.InDelta(t, 0.5+0.45*0.25, r.Threshold(), 1e-9, "the pinned request raises the threshold")
	b, err := r.Pin(true)
	require.NoError(t, err)
	_, err = r.Pin(true)
	require.ErrorIs(t, err, ErrSlowSaturated)
	fast, err := r.Pin(false)
	require.NoError(t, err, "the fast pool has no budget")
	require.Equal(t, "fast", fast.Pool.Name())
	a.Release()
	b.Release()
	fast.Release()
	require.Equal(t, 0, r.State().SlowActive)
}

func TestRoutingConfigValidation(t *testing.T) {
	require.NoError(t, DefaultRoutingConfig().ValidateAt("routing"))
	for _, tc := range []struct {
		edit func(*RoutingConfig)
		want string
	}{
		{func(c *RoutingConfig) { c.ClassifyBudget = -time.Millisecond }, "routing.classify_budget"},
		{func(c *RoutingConfig) { c.ClassifyBudget = 2 * time.Minute }, "routing.classify_budget"},
		{func(c *RoutingConfig) { c.Fallback = "Fast" }, "routing.fallback"},
		{func(c *RoutingConfig) { c.UnknownModel = "404" }, "routing.unknown_model"},
		{func(c *RoutingConfig) { c.ModelAliases = nil }, "routing.model_aliases"},
		{func(c *RoutingConfig) { c.ModelAliases = []string{"auto", " x"} }, "routing.model_aliases[1]"},
		{func(c *RoutingConfig) { c.ModelAliases = []string{"auto", "auto"} }, "routing.model_aliases[1]"},
	} {
		c := DefaultRoutingConfig()
		tc.edit(&c)
		require.ErrorContains(t, c.ValidateAt("routing"), tc.want)
	}
}
