package router

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/triage-gw/triage/batcher"
	"github.com/triage-gw/triage/decision"
	"github.com/triage-gw/triage/upstream"
)

// Config is the request pipeline's configuration: the result cache in front of the
// classifier, the cascade's first stage, the batcher that feeds the encoder, and the
// fast-or-slow decision, and how a routed request relates to its classification and model
// name. In the gateway's YAML they are the top-level sections cache, cascade, batcher,
// decision and routing.
type Config struct {
	Cache    CacheConfig
	Cascade  CascadeConfig
	Batcher  batcher.Config
	Decision decision.Config
	Routing  RoutingConfig
}

// ValidateAt reports every invalid field, each named from path; the sections keep their own
// YAML names under it ("" for the top level: "cache.ttl", "decision.alpha").
func (c Config) ValidateAt(path string) error {
	return errors.Join(
		c.Cache.ValidateAt(joinPath(path, "cache")),
		c.Cascade.ValidateAt(joinPath(path, "cascade")),
		c.Batcher.ValidateAt(joinPath(path, "batcher")),
		c.Decision.ValidateAt(joinPath(path, "decision")),
		c.Routing.ValidateAt(joinPath(path, "routing")),
	)
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// Options are the router's collaborators.
type Options struct {
	// Load builds the classifier model. Required. New calls it once; every Reload calls it
	// again.
	Load Loader
	// Fast and Slow are the pools a decision chooses between. Required. The router reads the
	// slow pool's health on every slow verdict; it does not run the pools.
	Fast, Slow *upstream.Pool
	// Slots are the slow slots. Nil means a local semaphore of
	// Decision.MaxSlowConcurrency slots (the fleet's in fleet mode).
	Slots SlowSlots
	// Shared is a second result-cache tier shared by a fleet's gateways. Nil means none.
	Shared SharedCache
	// Logger receives model loads, reloads and recovered batch panics. Nil means
	// slog.Default().
	Logger *slog.Logger
	// Registerer receives the router's and the batcher's metrics. Nil means a private
	// registry (nothing exported).
	Registerer prometheus.Registerer
	// Now is the clock of the result cache (expiry) and of the slow-share cap's window.
	// Nil means time.Now.
	Now func() time.Time
}

// Router is the request pipeline behind every front end: result cache → batcher →
// classifier → decision under the slow slots → the chosen pool. See the package
// documentation for its concurrency and lifecycle.
type Router struct {
	cfg    Config
	log    *slog.Logger
	m      *metrics
	load   Loader
	models holder
	// reloadMu serialises reloads.
	reloadMu sync.Mutex

	cache  *resultCache
	shared SharedCache // nil without one
	// tokens hands a text's first-stage tokenization to the batch that classifies it with
	// the encoder (the batcher carries texts only). A submitter stores before Submit and
	// deletes after it returns, so entries live only while their request waits.
	tokens sync.Map // string → classifier.Tokens
	batch  *batcher.Batcher[scored]
	policy decision.Policy
	slots  SlowSlots
	share  *decision.ShareCap // the slow-share cap (decision.max_slow_share) and its window's share
	fast   *upstream.Pool
	slow   *upstream.Pool
	names  modelNames

	// life carries the classifications a routed request stopped waiting for (its budget ran
	// out): they are not the request's, so they finish and fill the cache. Close cancels it
	// and waits for them in detached; lifeMu orders its cancellation before that wait and
	// every Add after it.
	lifeMu   sync.Mutex
	life     context.Context
	endLife  context.CancelFunc
	detached sync.WaitGroup

	started   atomic.Bool
	closeOnce sync.Once
}

// New validates cfg, builds the policy, slow slots, batcher, cache and metrics, and loads and
// probes the model (a model that cannot classify a probe text is refused). Nothing runs
// until Run. A Router that will not Run must be Closed.
func New(cfg Config, opts Options) (_ *Router, err error) {
	if err := cfg.ValidateAt(""); err != nil {
		return nil, fmt.Errorf("router: %w", err)
	}
	switch {
	case opts.Load == nil:
		return nil, errors.New("router: Options.Load is required")
	case opts.Fast == nil || opts.Slow == nil:
		return nil, errors.New("router: Options.Fast and Options.Slow are required")
	}
	r := &Router{cfg: cfg, log: opts.Logger, load: opts.Load, slots: opts.Slots, shared: opts.Shared, fast: opts.Fast, slow: opts.Slow}
	r.names = newModelNames(cfg.Routing, r.fast, r.slow)
	r.life, r.endLife = context.WithCancel(context.Background())
	if r.log == nil {
		r.log = slog.Default()
	}
	r.models.log = r.log
	r.models.cascade = cfg.Cascade
	reg := opts.Registerer
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	if r.slots == nil {
		r.slots = decision.NewSemaphore(cfg.Decision.MaxSlowConcurrency)
	}
	if r.policy, err = decision.NewPolicy(cfg.Decision); err != nil {
		return nil, fmt.Errorf("router: %w", err)
	}
	r.share = decision.NewShareCap(cfg.Decision, now)
	if r.batch, err = batcher.New(cfg.Batcher, r.runBatch, batcher.Options{Logger: r.log, Registerer: reg}); err != nil {
		return nil, fmt.Errorf("router: %w", err)
	}
	if r.cache, err = newResultCache(cfg.Cache, now); err != nil {
		return nil, fmt.Errorf("router: %w", err)
	}
	defer func() {
		if err != nil {
			r.endLife()
			r.cache.close()
		}
	}()
	if r.m, err = newMetrics(reg, r); err != nil {
		return nil, err
	}
	m, err := loadAndProbe(context.Background(), r.load)
	if err != nil {
		return nil, fmt.Errorf("router: %w", err)
	}
	if err := r.models.swap(m); err != nil {
		m.Close()
		return nil, err
	}
	r.m.setModel(m.Version())
	r.logStages(m)
	if cut := m.LabelThreshold(); cfg.Decision.Policy == decision.PolicyQuadratic && cfg.Decision.Base != cut {
		r.log.Warn("decision.base differs from the model's label threshold: at zero load the decision is not the model's label",
			"decision_base", cfg.Decision.Base, "label_threshold", cut, "model_version", m.Version())
	}
	return r, nil
}

// logStages says which stages a newly current model classifies with.
func (r *Router) logStages(m Model) {
	l := r.models.peek()
	switch {
	case l == nil:
	case l.staged != nil:
		r.log.Info("classifier cascade on: the first stage decides outside its band, the encoder inside",
			"model_version", l.version, "band_low", l.band.Lo, "band_high", l.band.Hi)
	case r.cfg.Cascade.Enabled:
		r.log.Info("classifier cascade on but this model has no first stage: every text goes to the encoder", "model_version", l.version)
	default:
		r.log.Info("classifier cascade off: every text goes to the encoder", "model_version", l.version)
	}
}

// Run runs the batcher until ctx ends, then closes the router: the model is closed once its
// last batch has released it, and the cache stops. Requests submitted after that fail with
// ErrClosed. Run may be called once.
func (r *Router) Run(ctx context.Context) error {
	if !r.started.CompareAndSwap(false, true) {
		return errors.New("router: Run called twice")
	}
	defer r.Close()
	return r.batch.Run(ctx)
}

// Close releases the model (once its last batch is done) and the cache. Run calls it on its
// way out; call it directly only for a Router that never ran. Idempotent.
func (r *Router) Close() {
	r.closeOnce.Do(func() {
		r.lifeMu.Lock()
		r.endLife()
		r.lifeMu.Unlock()
		r.detached.Wait()
		r.models.close()
		r.cache.close()
	})
}

// Version returns the current model's version, or "" after Close.
func (r *Router) Version() string {
	if l := r.models.peek(); l != nil {
		return l.version
	}
	return ""
}

// Policy returns the configured decision policy's name.
func (r *Router) Policy() string { return r.cfg.Decision.Policy }

// Fast returns the fast pool.
func (r *Router) Fast() *upstream.Pool { return r.fast }

// Slow returns the slow pool.
func (r *Router) Slow() *upstream.Pool { return r.slow }

// WaitCache blocks until the result cache has applied the writes made so far. The cache is
// asynchronous and lossy (a write may land later or be dropped); tests and tools that need a
// just-classified text to hit use this, as ristretto's own Wait.
func (r *Router) WaitCache() { r.cache.wait() }
