package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/triage-gw/triage/batcher"
	"github.com/triage-gw/triage/config"
	"github.com/triage-gw/triage/decision"
	"github.com/triage-gw/triage/upstream"
)

// Backend is a long-lived part the gateway depends on but does not own the config of, such
// as the built-in simulated replicas. Run serves until ctx ends.
type Backend interface {
	Run(ctx context.Context) error
}

// Options are the server's collaborators.
type Options struct {
	// Load builds the classifier model. Required. New calls it once; every reload calls it
	// again.
	Load Loader
	// Logger receives everything the server logs. Nil means slog.Default().
	Logger *slog.Logger
	// Registry receives every metric (the server's, the batcher's and the pools') and is
	// served at /metrics. Nil means a new private registry.
	Registry *prometheus.Registry
	// Listener is where Run serves. Nil means Run listens on cfg.Server.Listen.
	Listener net.Listener
	// Backends are started first by Run and stopped last, after the HTTP drain, so requests
	// in flight can still reach them (the built-in simulators; see ListenBuiltin).
	Backends []Backend
	// Now is the result cache's clock (expiry). Nil means time.Now.
	Now func() time.Time
}

// Server is the gateway's HTTP layer and the request path behind it: result cache, batcher,
// classifier, decision, slow-path semaphore and the two upstream pools. See the package
// documentation for its concurrency and lifecycle.
type Server struct {
	cfg      config.Config
	lim      limits
	log      *slog.Logger
	reg      *prometheus.Registry
	m        *metrics
	app      *fiber.App
	ln       net.Listener
	backends []Backend

	load     Loader
	models   models
	reloadMu sync.Mutex // one reload at a time

	cache  *resultCache
	batch  *batcher.Batcher[scored]
	policy decision.Policy
	sem    *decision.Semaphore
	fast   *upstream.Pool
	slow   *upstream.Pool

	// base parents every upstream request; cancelled when the drain bound has passed, to cut
	// what is still running.
	base       context.Context
	cancelBase context.CancelFunc
	active     inflight
	draining   atomic.Bool
	started    atomic.Bool
	startedAt  time.Time
}

// New validates cfg, loads and probes the model and builds every part. Nothing runs and
// nothing listens until Run. cfg.Pools must have replicas: for the built-in simulated pools
// call ListenBuiltin first.
func New(cfg config.Config, opts Options) (_ *Server, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	if cfg.Pools.Builtin() {
		return nil, errors.New("server: no pool has replicas; call ListenBuiltin to start the built-in simulated pools first")
	}
	if opts.Load == nil {
		return nil, errors.New("server: Options.Load is required")
	}
	s := &Server{
		cfg:       cfg,
		lim:       limits{maxTextBytes: cfg.Server.MaxTextBytes, maxBatchTexts: cfg.Server.MaxBatchTexts},
		log:       opts.Logger,
		reg:       opts.Registry,
		ln:        opts.Listener,
		backends:  opts.Backends,
		load:      opts.Load,
		startedAt: time.Now(),
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.reg == nil {
		s.reg = prometheus.NewRegistry()
	}
	s.models.log = s.log
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	s.base, s.cancelBase = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			s.cancelBase()
		}
	}()

	if s.policy, err = decision.NewPolicy(cfg.Decision); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	s.sem = decision.NewSemaphore(cfg.Decision.MaxSlowConcurrency)
	if s.batch, err = batcher.New(cfg.Batcher, s.runBatch, s.reg, batcher.WithLogger(s.log)); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	if s.fast, err = newPool(cfg.Pools.Fast, s.log, s.reg); err != nil {
		return nil, fmt.Errorf("server: fast pool: %w", err)
	}
	if s.slow, err = newPool(cfg.Pools.Slow, s.log, s.reg); err != nil {
		return nil, fmt.Errorf("server: slow pool: %w", err)
	}
	if s.cache, err = newResultCache(cfg.Cache, now); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	defer func() {
		if err != nil {
			s.cache.close()
		}
	}()
	s.m, err = newMetrics(s.reg, gaugeFuncs{
		slowActive: func() float64 { return float64(s.sem.Active()) },
		slowLoad:   func() float64 { return s.sem.Load() },
		threshold:  func() float64 { return s.policy.Decide(0, s.state()).Threshold },
		evictions:  s.cache.evictions,
	})
	if err != nil {
		return nil, err
	}

	m, err := s.load()
	if err != nil {
		return nil, fmt.Errorf("server: load classifier: %w", err)
	}
	if err := probe(context.Background(), m); err != nil {
		m.Close()
		return nil, fmt.Errorf("server: classifier model %q refused: %w", m.Version(), err)
	}
	if _, err := s.models.swap(m); err != nil {
		m.Close()
		return nil, err
	}
	s.m.setModel(m.Version())
	s.app = s.newApp()
	return s, nil
}

// newPool builds one upstream pool with its picker and admitter.
func newPool(pc config.PoolConfig, log *slog.Logger, reg prometheus.Registerer) (*upstream.Pool, error) {
	picker, err := upstream.NewPicker(pc.Policy)
	if err != nil {
		return nil, err
	}
	adm, err := upstream.NewAdmitter(pc.Admission)
	if err != nil {
		return nil, err
	}
	return upstream.New(pc.PoolConfig, picker, adm, upstream.Options{Logger: log, Registerer: reg})
}

// state snapshots the load a decision is made under.
func (s *Server) state() decision.State {
	return decision.State{SlowActive: s.sem.Active(), SlowMax: s.sem.Max(), QueueLen: s.batch.QueueLen()}
}

// Run serves until ctx ends, then shuts down in order: readiness drops; the listener closes
// and in-flight requests (streams included) get server.shutdown_timeout to finish, after which
// those left are cut; then the batcher and the pools stop, the classifier is closed, and the
// backends stop last. A part that fails while serving starts the same shutdown and its error
// is returned. Run may be called once.
func (s *Server) Run(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		return errors.New("server: Run called twice")
	}
	defer s.cache.close()
	defer s.cancelBase()
	if s.ln == nil {
		ln, err := net.Listen("tcp", s.cfg.Server.Listen)
		if err != nil {
			s.models.close()
			return fmt.Errorf("server: listen: %w", err)
		}
		s.ln = ln
	}

	failed := make(chan error, len(s.backends)+4)
	backCtx, stopBack := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBack()
	var backWG sync.WaitGroup
	for _, b := range s.backends {
		backWG.Go(func() { report(failed, "backend", b.Run(backCtx)) })
	}

	coreCtx, stopCore := context.WithCancel(context.WithoutCancel(ctx))
	defer stopCore()
	var coreWG sync.WaitGroup
	coreWG.Go(func() { report(failed, "batcher", s.batch.Run(coreCtx)) })
	coreWG.Go(func() { report(failed, "fast pool", s.fast.Run(coreCtx)) })
	coreWG.Go(func() { report(failed, "slow pool", s.slow.Run(coreCtx)) })

	served := make(chan error, 1)
	go func() { served <- s.app.Listener(s.ln) }()
	s.log.Info("triage listening", "addr", s.ln.Addr().String(), "model_version", s.models.version(),
		"fast_pool", s.fast.Name(), "slow_pool", s.slow.Name(), "decision_policy", s.cfg.Decision.Policy)

	var runErr error
	select {
	case <-ctx.Done():
		s.log.Info("shutting down", "shutdown_timeout", s.cfg.Server.ShutdownTimeout.String())
	case err := <-served:
		runErr = fmt.Errorf("server: serve: %w", err)
		served <- nil // Listener has returned; let the drain below see it
	case err := <-failed:
		runErr = err
	}
	if runErr != nil {
		s.log.Error("shutting down after a failure", "err", runErr)
	}

	// 1. Not ready, stop accepting, drain.
	s.draining.Store(true)
	deadline := time.Now().Add(s.cfg.Server.ShutdownTimeout)
	shutCtx, cancel := context.WithDeadline(context.Background(), deadline)
	if err := s.app.ShutdownWithContext(shutCtx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		s.log.Warn("http shutdown", "err", err)
	}
	// fasthttp closes only listeners it has started serving; if ctx ended before Serve got
	// going, closing ours makes it return at once.
	s.ln.Close()
	select {
	case <-s.active.idle():
	case <-shutCtx.Done():
	}
	cancel()
	if n := s.active.count(); n > 0 {
		// 2. Cut what did not finish: cancelling base ends upstream requests and their streams.
		s.log.Warn("drain timed out, cutting in-flight requests", "in_flight", n)
		s.cancelBase()
		select {
		case <-s.active.idle():
		case <-time.After(5 * time.Second):
			s.log.Error("requests still in flight after being cut; stopping anyway", "in_flight", s.active.count())
		}
	}
	select {
	case <-served:
	case <-time.After(time.Second):
		s.log.Warn("http listener did not return after shutdown")
	}

	// 3. The batcher and pools, then the model.
	stopCore()
	coreWG.Wait()
	s.models.close()

	// 4. Backends last.
	stopBack()
	backWG.Wait()
	close(failed)
	for err := range failed {
		if runErr == nil {
			runErr = err
		}
	}
	s.log.Info("shutdown complete")
	return runErr
}

// report sends a part's failure to failed; a part that returns nil has simply stopped.
func report(failed chan<- error, part string, err error) {
	if err != nil {
		failed <- fmt.Errorf("%s: %w", part, err)
	}
}

// Addr returns the address Run serves on, or nil before it listens.
func (s *Server) Addr() net.Addr {
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

// inflight counts requests being handled, streams included, and tells when none are left.
// It starts no goroutine: idle hands out a channel that done closes at zero.
type inflight struct {
	mu   sync.Mutex
	n    int
	zero chan struct{} // closed when n reaches 0; nil when nobody waits
}

func (t *inflight) add() {
	t.mu.Lock()
	t.n++
	t.mu.Unlock()
}

func (t *inflight) done() {
	t.mu.Lock()
	t.n--
	if t.n == 0 && t.zero != nil {
		close(t.zero)
		t.zero = nil
	}
	t.mu.Unlock()
}

func (t *inflight) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.n
}

// idle returns a channel closed once no request is in flight.
func (t *inflight) idle() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n == 0 {
		c := make(chan struct{})
		close(c)
		return c
	}
	if t.zero == nil {
		t.zero = make(chan struct{})
	}
	return t.zero
}
