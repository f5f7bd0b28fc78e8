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

	"github.com/triage-gw/triage/config"
	"github.com/triage-gw/triage/router"
	"github.com/triage-gw/triage/upstream"
)

// Backend is a long-lived part the gateway depends on but does not own the config of, such
// as the built-in simulated replicas. Run serves until ctx ends.
type Backend interface {
	Run(ctx context.Context) error
}

// Options are the server's collaborators.
type Options struct {
	// Router is the request pipeline: classification, decision and the two pools. Required.
	// Run runs it and the pools, and stops them after the HTTP drain; the server owns it from
	// New on (it closes it when Run ends, or when New fails).
	Router *router.Router
	// Logger receives everything the server logs. Nil means slog.Default().
	Logger *slog.Logger
	// Registry is served at /metrics; the server registers its own metrics (and the Go and
	// process collectors) on it. Pass the registry the router and the pools registered on.
	// Nil means a new private registry.
	Registry *prometheus.Registry
	// Listener is where Run serves. Nil means Run listens on cfg.Server.Listen.
	Listener net.Listener
	// Backends are started first by Run and stopped last, after the HTTP drain, so requests
	// in flight can still reach them (the built-in simulators).
	Backends []Backend
	// SharedResponses, in fleet mode, shares the table of OpenAI Responses ids and the
	// replica that stored each with the other gateways. Nil: this gateway's table only.
	SharedResponses SharedResponses
}

// Server is the gateway's HTTP layer. It decodes and validates requests, asks the router
// where each goes, proxies it there and answers. See the package documentation for its
// concurrency and lifecycle.
type Server struct {
	cfg      config.Config
	lim      limits
	log      *slog.Logger
	reg      *prometheus.Registry
	m        *metrics
	app      *fiber.App
	ln       net.Listener
	backends []Backend

	router *router.Router
	auth   *keyAuth // nil without auth.keys_file
	// responses remembers the replica of each stored OpenAI Responses id.
	responses responseTable
	fast      *upstream.Pool
	slow      *upstream.Pool

	// base parents every upstream request; cancelled when the drain bound has passed, to cut
	// what is still running.
	base       context.Context
	cancelBase context.CancelFunc
	active     inflight
	gone       *goneWatcher
	draining   atomic.Bool
	started    atomic.Bool
	startedAt  time.Time
}

// New validates cfg and builds the HTTP layer over opts.Router. Nothing runs and nothing
// listens until Run. If New fails it closes the router.
func New(cfg config.Config, opts Options) (_ *Server, err error) {
	if opts.Router == nil {
		return nil, errors.New("server: Options.Router is required")
	}
	defer func() {
		if err != nil {
			opts.Router.Close()
		}
	}()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	s := &Server{
		cfg:       cfg,
		lim:       limits{maxTextBytes: cfg.Server.MaxTextBytes, maxBatchTexts: cfg.Server.MaxBatchTexts},
		log:       opts.Logger,
		reg:       opts.Registry,
		ln:        opts.Listener,
		backends:  opts.Backends,
		router:    opts.Router,
		fast:      opts.Router.Fast(),
		slow:      opts.Router.Slow(),
		startedAt: time.Now(),
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.reg == nil {
		s.reg = prometheus.NewRegistry()
	}
	if s.m, err = newMetrics(s.reg); err != nil {
		return nil, err
	}
	rm, err := newResponseMetrics(s.reg)
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	local := newLocalResponses(cfg.Server.ResponseAffinityEntries, cfg.Server.ResponseAffinityTTL, nil, rm)
	s.responses = local
	if opts.SharedResponses != nil {
		s.responses = &tieredResponses{local: local, shared: opts.SharedResponses, ttl: cfg.Server.ResponseAffinityTTL}
	}
	if cfg.Auth.KeysFile != "" {
		if s.auth, err = newKeyAuth(cfg.Auth.KeysFile, cfg.Auth.ReloadInterval, s.log, s.reg); err != nil {
			return nil, fmt.Errorf("server: %w", err)
		}
	}
	s.gone = newGoneWatcher(goneEvery, s.m.clientGone, s.log)
	s.base, s.cancelBase = context.WithCancel(context.Background())
	s.app = s.newApp()
	return s, nil
}

// Run serves until ctx ends, then shuts down in order: readiness drops; the listener closes
// and in-flight requests (streams included) get server.shutdown_timeout to finish, after which
// those left are cut; then the router (batcher, then the classifier once its last batch is
// done) and the pools stop, and the backends stop last. A part that fails while serving starts
// the same shutdown and its error is returned. Run may be called once.
func (s *Server) Run(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		return errors.New("server: Run called twice")
	}
	defer s.cancelBase()
	if s.ln == nil {
		ln, err := net.Listen("tcp", s.cfg.Server.Listen)
		if err != nil {
			s.router.Close()
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
	coreWG.Go(func() { report(failed, "router", s.router.Run(coreCtx)) })
	coreWG.Go(func() { report(failed, "fast pool", s.fast.Run(coreCtx)) })
	coreWG.Go(func() { report(failed, "slow pool", s.slow.Run(coreCtx)) })
	if s.auth != nil {
		coreWG.Go(func() { report(failed, "api keys", s.auth.Run(coreCtx)) })
	}
	// Stopped with the core, after the drain: requests drained may still lose their client.
	coreWG.Go(func() { report(failed, "client-gone watcher", s.gone.Run(coreCtx)) })

	sc := s.cfg.Server
	conns := newConnListener(s.ln, sc.MaxConnections, sc.MaxConnectionsPerIP, s.m, s.log,
		func(err error) []byte { return rawErrorResponse(err, s.log) })
	served := make(chan error, 1)
	go func() { served <- s.app.Listener(conns) }()
	s.log.Info("triage listening", "addr", s.ln.Addr().String(), "model_version", s.router.Version(),
		"fast_pool", s.fast.Name(), "slow_pool", s.slow.Name(), "decision_policy", s.router.Policy())

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
	conns.Close()
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

	// 3. The router (batcher, then the model) and the pools.
	stopCore()
	coreWG.Wait()

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
