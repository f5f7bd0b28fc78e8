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

	"github.com/triage-gw/triage/router"
	"github.com/triage-gw/triage/upstream"
)

// Options are the server's collaborators.
type Options struct {
	// Router is the request pipeline: classification, decision and the two pools, which the
	// server reads for status and readiness. Required. The server does not run or close it:
	// whoever runs the server runs the router and the pools, and stops them after Run has
	// drained (cmd/triage's lifecycle).
	Router *router.Router
	// Logger receives everything the server logs. Nil means slog.Default().
	Logger *slog.Logger
	// Registry is served at /metrics; the server registers its own metrics (and the Go and
	// process collectors) on it. Pass the registry the router and the pools registered on.
	// Nil means a new private registry.
	Registry *prometheus.Registry
	// Listener is where Run serves. Nil means Run listens on cfg.HTTP.Listen.
	Listener net.Listener
	// SharedResponses, in fleet mode, shares the table of OpenAI Responses ids and the
	// replica that stored each with the other gateways. Nil: this gateway's table only.
	SharedResponses SharedResponses
}

// Server is the gateway's HTTP layer. It decodes and validates requests, asks the router
// where each goes, proxies it there and answers. See the package documentation for its
// concurrency and lifecycle.
type Server struct {
	cfg Config
	lim limits
	log *slog.Logger
	reg *prometheus.Registry
	m   *metrics
	app *fiber.App
	ln  net.Listener

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
// listens until Run.
func New(cfg Config, opts Options) (_ *Server, err error) {
	if opts.Router == nil {
		return nil, errors.New("server: Options.Router is required")
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	s := &Server{
		cfg:       cfg,
		lim:       limits{cfg.HTTP.MaxTextBytes, cfg.HTTP.MaxBatchTexts, cfg.HTTP.SplitPasted},
		log:       opts.Logger,
		reg:       opts.Registry,
		ln:        opts.Listener,
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
	local := newLocalResponses(cfg.HTTP.ResponseAffinityEntries, cfg.HTTP.ResponseAffinityTTL, nil, rm)
	s.responses = local
	if opts.SharedResponses != nil {
		s.responses = &tieredResponses{local: local, shared: opts.SharedResponses, ttl: cfg.HTTP.ResponseAffinityTTL}
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

// Run serves until ctx ends, then drains: readiness drops; the listener closes and in-flight
// requests (streams included) get server.shutdown_timeout to finish, after which those left
// are cut. It returns once nothing is in flight, so the caller may then stop the router and
// the pools. A failure to listen or serve starts the same drain and is returned. Run may be
// called once.
func (s *Server) Run(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		return errors.New("server: Run called twice")
	}
	defer s.cancelBase()
	if s.ln == nil {
		ln, err := net.Listen("tcp", s.cfg.HTTP.Listen)
		if err != nil {
			return fmt.Errorf("server: listen: %w", err)
		}
		s.ln = ln
	}
	// The client-gone watcher stops after the drain: requests drained may still lose their client.
	goneCtx, stopGone := context.WithCancel(context.WithoutCancel(ctx))
	goneErr := make(chan error, 1)
	go func() { goneErr <- s.gone.Run(goneCtx) }()

	hc := s.cfg.HTTP
	conns := newConnListener(s.ln, hc.MaxConnections, hc.MaxConnectionsPerIP, s.m, s.log,
		func(err error) []byte { return rawErrorResponse(err, s.log) })
	served := make(chan error, 1)
	go func() { served <- s.app.Listener(conns) }()
	s.log.Info("triage listening", "addr", s.ln.Addr().String(), "model_version", s.router.Version(),
		"fast_pool", s.fast.Name(), "slow_pool", s.slow.Name(), "decision_policy", s.router.Policy())

	var runErr error
	select {
	case <-ctx.Done():
		s.log.Info("shutting down", "shutdown_timeout", hc.ShutdownTimeout.String())
	case err := <-served:
		runErr = fmt.Errorf("server: serve: %w", err)
		served <- nil // Listener has returned; let the drain below see it
	case err := <-goneErr:
		runErr = fmt.Errorf("client-gone watcher: %w", err)
		goneErr <- nil
	}
	if runErr != nil {
		s.log.Error("shutting down after a failure", "err", runErr)
	}
	s.drain(conns, served)
	stopGone()
	if err := <-goneErr; err != nil && runErr == nil {
		runErr = fmt.Errorf("client-gone watcher: %w", err)
	}
	return runErr
}

// drain drops readiness, stops accepting and waits for in-flight requests until
// server.shutdown_timeout, then cuts those left through the base context.
func (s *Server) drain(conns *connListener, served chan error) {
	s.draining.Store(true)
	deadline := time.Now().Add(s.cfg.HTTP.ShutdownTimeout)
	shutCtx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
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
	if n := s.active.count(); n > 0 {
		// Cut what did not finish: cancelling base ends upstream requests and their streams.
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
}

// RunKeys re-reads auth.keys_file every auth.reload_interval until ctx ends; without a keys
// file it returns nil at once.
func (s *Server) RunKeys(ctx context.Context) error {
	if s.auth == nil {
		return nil
	}
	return s.auth.Run(ctx)
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
