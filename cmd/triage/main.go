// Command triage is the gateway: it classifies each request's prompt, decides between the
// fast and the slow pool under the current load, and proxies the request to a replica of the
// chosen pool.
//
//	triage --simulate                    # built-in simulated pools on 127.0.0.1:8080
//	triage --config triage.yaml --listen 0.0.0.0:8080
//	triage --print-config                # the effective configuration, secrets redacted
//
// Configuration: defaults, then the YAML file (--config or TRIAGE_CONFIG), then TRIAGE_*
// environment variables, then --listen. config/example.yaml documents every setting.
// SIGHUP reloads the classifier model; SIGINT and SIGTERM shut down gracefully.
//
// Called as mockllm (a link named mockllm to this binary, as in the image), it is the
// simulated LLM server of cmd/mockllm instead: the simulator is in this binary anyway, and a
// second binary would add its 10 MB to the image.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/triage-gw/triage/classifier"
	"github.com/triage-gw/triage/classifier/onnx"
	"github.com/triage-gw/triage/config"
	"github.com/triage-gw/triage/fleet"
	"github.com/triage-gw/triage/internal/probe"
	"github.com/triage-gw/triage/router"
	"github.com/triage-gw/triage/server"
	"github.com/triage-gw/triage/sim"
	"github.com/triage-gw/triage/sim/mockllm"
	"github.com/triage-gw/triage/upstream"
	"github.com/triage-gw/triage/upstream/kvevents"
)

func main() {
	if calledAsMockllm(os.Args[0]) {
		os.Exit(mockllm.Main(os.Args[1:]))
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "triage:", err)
		os.Exit(1)
	}
}

// calledAsMockllm reports whether the program was started under the name mockllm.
func calledAsMockllm(arg0 string) bool {
	return filepath.Base(arg0) == "mockllm"
}

// run parses flags, loads the configuration and serves until ctx ends.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("triage", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // usage is printed by us, on --help only
	configPath := fs.String("config", "", "YAML config file (default: $TRIAGE_CONFIG, else built-in defaults)")
	listen := fs.String("listen", server.DefaultHTTPConfig().Listen, "address to serve on; overrides server.listen")
	simulate := fs.Bool("simulate", false, "start the built-in simulated fast and slow pools (sim.enabled): every answer is made up; for demos and tests, never with configured replicas")
	printConfig := fs.Bool("print-config", false, "print the effective configuration as YAML (secrets redacted) and exit")
	printExample := fs.Bool("print-example", false, "print the commented example configuration (every setting with its default) and exit")
	pprofAddr := fs.String("pprof", "", "serve Go's runtime profiles (net/http/pprof, under /debug/pprof/) at this loopback address, e.g. 127.0.0.1:6060, for profiling; empty: off")
	healthcheck := fs.Bool("healthcheck", false, "GET /healthz of the gateway at the configured listen address (127.0.0.1 for a wildcard host) and exit 0 if it answers 200, else 1: the image's HEALTHCHECK")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(stdout, fs)
			return nil
		}
		return fmt.Errorf("%w (see triage --help)", err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (see triage --help)", fs.Arg(0))
	}
	if *printExample {
		_, err := stdout.Write(config.Example)
		return err
	}
	var renamed [][2]string // old and new names of settings read under a name they no longer have
	src := config.Sources{File: *configPath, Simulate: *simulate, ListenOnly: *healthcheck, InstallRoot: installRoot(),
		Deprecated: func(old, new string) { renamed = append(renamed, [2]string{old, new}) }}
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "listen" {
			src.Listen = *listen
		}
	})
	cfg, err := config.Load(src)
	if err != nil {
		return err
	}
	if *healthcheck {
		url, err := probe.URL(cfg.Server.Listen, "/healthz")
		if err != nil {
			return err
		}
		return probe.Check(ctx, url)
	}
	if *printConfig {
		out, err := cfg.YAML()
		if err != nil {
			return err
		}
		_, err = stdout.Write(out)
		return err
	}
	log := newLogger(cfg.Log, stderr)
	for _, r := range renamed {
		log.Warn("deprecated setting name: it still works, but use the new one", "old", r[0], "new", r[1])
	}
	return serve(ctx, cfg, log, *pprofAddr)
}

// serve builds the parts and runs them in the lifecycle's order (lifecycle.go).
func serve(ctx context.Context, cfg config.Config, log *slog.Logger, pprofAddr string) error {
	var backends []backend
	if pprofAddr != "" {
		p, err := listenPprof(pprofAddr)
		if err != nil {
			return err
		}
		defer p.ln.Close() // Run closes it; this covers a failed build
		backends = append(backends, p)
		log.Info("serving runtime profiles", "addr", p.Addr().String(), "path", "/debug/pprof/")
	}
	if cfg.Sim.Enabled {
		locals, err := listenBuiltin(&cfg, log)
		if err != nil {
			return err
		}
		for _, l := range locals {
			defer l.Close() // Run closes the listeners; this covers a failed build
			backends = append(backends, l)
		}
		// WARN, not INFO: an operator scanning for trouble must see that nothing is real.
		log.Warn("SIMULATED POOLS: sim.enabled (or --simulate) is set, every answer is made up by the "+
			"built-in simulator; not for production",
			"fast_replicas", len(cfg.Pools.Fast.Replicas), "slow_replicas", len(cfg.Pools.Slow.Replicas))
	}
	gw, err := build(cfg, parts{log: log, backends: backends})
	if err != nil {
		return err
	}
	return gw.stages.run(ctx, log)
}

// backend is a long-lived part the gateway depends on but does not serve: the built-in
// simulators and the fleet. Run serves until ctx ends.
type backend interface {
	Run(ctx context.Context) error
}

// parts are what build takes besides the config.
type parts struct {
	log      *slog.Logger
	backends []backend     // started first, stopped last
	listener net.Listener  // nil: listen on server.listen
	load     router.Loader // nil: the real classifier from cfg.Classifier
}

// gateway is the built gateway: its stages, and the router for the tests.
type gateway struct {
	stages lifecycle
	router *router.Router
}

// build wires the gateway: in fleet mode the fleet's Redis state (slow slots, shared cache,
// replica affinity, the Responses table), the two pools (each with the replica policy and admission its config
// names, sharing picks and load through the fleet's affinity), the router over them with the
// classifier, and the HTTP server, all registering their metrics on one registry; then the
// order they run and stop in. On error everything built so far is released.
func build(cfg config.Config, p parts) (_ *gateway, err error) {
	reg := prometheus.NewRegistry()
	var f *fleet.Fleet
	if cfg.Fleet.Enabled {
		if f, err = fleet.New(cfg.Fleet, cfg.Decision.MaxSlowConcurrency, fleet.Options{Logger: p.log, Registerer: reg}); err != nil {
			return nil, err
		}
		defer func() {
			if err != nil {
				f.Conn.Close()
			}
		}()
	}
	// Both pools price their tokens at the slow pool's prices too: summed, the all-slow cost.
	popts := upstream.Options{Logger: p.log, Registerer: reg, BaselinePrices: cfg.Pools.Slow.Prices}
	if f != nil && f.Affinity != nil {
		popts.Picks, popts.Remote = f.Affinity, f.Affinity
	}
	fast, err := upstream.New(cfg.Pools.Fast, popts)
	if err != nil {
		return nil, err
	}
	slow, err := upstream.New(cfg.Pools.Slow, popts)
	if err != nil {
		return nil, err
	}
	load := p.load
	if load == nil {
		load = func() (router.Model, error) { return loadClassifier(cfg.Classifier) }
	}
	ropts := router.Options{Load: load, Fast: fast, Slow: slow, Logger: p.log, Registerer: reg}
	if f != nil {
		ropts.Slots = f.Slots
		if f.Cache != nil {
			ropts.Shared = f.Cache
		}
		if f.Affinity != nil {
			if err = errors.Join(f.Affinity.Attach(fast), f.Affinity.Attach(slow)); err != nil {
				return nil, err
			}
		}
		// The fleet runs like a backend: it starts before the gateway serves and stops after
		// the drain, once every slow slot has been released, and gives its grant back.
		p.backends = append(p.backends, f)
	}
	rt, err := router.New(cfg.Router(), ropts)
	if err != nil {
		return nil, err
	}
	sopts := server.Options{Router: rt, Logger: p.log, Registry: reg, Listener: p.listener}
	if f != nil {
		sopts.SharedResponses = f.Responses
	}
	srv, err := server.New(cfg.HTTP(), sopts)
	if err != nil {
		rt.Close()
		return nil, err
	}
	var back stage
	for _, b := range p.backends {
		back = append(back, part{"backend", b.Run})
	}
	return &gateway{router: rt, stages: lifecycle{
		back,
		{{"api keys", srv.RunKeys}},
		{{"fast pool", fast.Run}, {"slow pool", slow.Run}},
		{{"router", rt.Run}},
		{{"server", srv.Run}, {"sighup reloader", reloadOnHUP(rt, p.log)}},
	}}, nil
}

// reloadOnHUP reloads the classifier model on every SIGHUP until ctx ends. It takes SIGHUP
// over at once, before anything serves: by default the signal would end the process.
func reloadOnHUP(rt *router.Router, log *slog.Logger) func(context.Context) error {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	return func(ctx context.Context) error {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-hup:
				log.Info("SIGHUP: reloading the classifier model")
				_, _ = rt.Reload(ctx) // a refused model is logged by Reload; the old one keeps serving
			}
		}
	}
}

// listenBuiltin opens the listeners of the built-in simulated pools described by cfg.Sim and
// points cfg.Pools at them (their model names too, unless set). They run first and stop last.
func listenBuiltin(cfg *config.Config, log *slog.Logger) ([]*sim.Local, error) {
	fast, err := sim.ListenLocalPD(cfg.Sim.Fast, cfg.Sim.FastReplicas, cfg.Sim.FastPrefillReplicas, log)
	if err != nil {
		return nil, fmt.Errorf("built-in fast pool: %w", err)
	}
	slow, err := sim.ListenLocalPD(cfg.Sim.Slow, cfg.Sim.SlowReplicas, cfg.Sim.SlowPrefillReplicas, log)
	if err != nil {
		fast.Close()
		return nil, fmt.Errorf("built-in slow pool: %w", err)
	}
	for _, p := range []struct {
		pool  *upstream.PoolConfig
		local *sim.Local
		model string
	}{{&cfg.Pools.Fast, fast, cfg.Sim.Fast.Model}, {&cfg.Pools.Slow, slow, cfg.Sim.Slow.Model}} {
		ids, urls := p.local.Replicas()
		events := p.local.EventEndpoints()
		roles := p.local.Roles()
		for i := range ids {
			rc := upstream.ReplicaConfig{URL: urls[i], ID: ids[i], Role: builtinRole(roles[i])}
			if events[i] != "" {
				rc.KVEvents = &kvevents.Config{Endpoint: events[i], Topic: sim.KVEventsTopic}
			}
			p.pool.Replicas = append(p.pool.Replicas, rc)
		}
		if p.pool.Model == "" {
			p.pool.Model = p.model
		}
	}
	return []*sim.Local{fast, slow}, nil
}

// builtinRole is the gateway's role of a simulated replica with the given sim role: a
// replica without a KV connector serves whole requests.
func builtinRole(simRole string) string {
	if simRole == "" {
		return upstream.RoleBoth
	}
	return simRole
}

// installRoot is the directory above the executable's (the repository root for bin/triage),
// where the default model paths are looked for when the working directory lacks them. Empty
// when the executable cannot be found.
func installRoot() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	if resolved, err := filepath.EvalSymlinks(exe); err == nil {
		exe = resolved
	}
	return filepath.Dir(filepath.Dir(exe))
}

// The real model is wired in here and only here: the router sees it through these
// interfaces, so that everything but this program and classifier/onnx builds without the
// model runtime (CGO_ENABLED=0).
var (
	_ router.Model           = (*onnx.Classifier)(nil)
	_ router.Staged          = (*onnx.Classifier)(nil)
	_ router.InBandScorer    = (*onnx.Classifier)(nil)
	_ router.Filtered        = (*onnx.Classifier)(nil)
	_ router.WordCacheStater = (*onnx.Classifier)(nil)
)

// loadClassifier builds the real model; a failed load must not yield a typed nil.
func loadClassifier(cfg classifier.Config) (router.Model, error) {
	if err := cfg.CheckFiles("classifier"); err != nil {
		return nil, err
	}
	c, err := onnx.New(cfg)
	if err != nil {
		return nil, err
	}
	return c, nil
}

func newLogger(cfg config.LogConfig, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.Level)) // validated by config
	opts := &slog.HandlerOptions{Level: level}
	if cfg.Format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

func usage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprint(w, `Usage: triage [flags]

Triage classifies each request's prompt (fast or slow), decides under the current slow-pool
load, and proxies it to a replica of the chosen pool. Both pools must list replicas
(pools.fast.replicas, pools.slow.replicas); 'triage --simulate' instead starts built-in
simulated fast and slow pools, so one command shows the whole system. A configuration
without replicas stops at startup: the simulators never start by accident.

Flags:
`)
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	fmt.Fprintf(w, `
Configuration is loaded in this order, later sources winning:
  1. built-in defaults
  2. the YAML file given by --config (or the %s environment variable);
     unknown keys are errors; see config/example.yaml or 'triage --print-example'
  3. environment variables %s<PATH>: the setting's YAML path with dots as underscores,
     upper-cased (decision.alpha -> TRIAGE_DECISION_ALPHA); scalar settings only,
     an unknown %s variable is an error
  4. --listen and --simulate
Durations are strings like "50ms" or "1m30s". 'triage --print-config' shows the result.

Signals: SIGHUP reloads the classifier model; SIGINT/SIGTERM shut down gracefully.

Settings (environment variable = default):
`, config.EnvConfigFile, config.EnvPrefix, config.EnvPrefix)
	width := 0
	vars := config.EnvVars()
	for _, v := range vars {
		width = max(width, len(v.Name))
	}
	for _, v := range vars {
		def := v.Default
		if def == "" {
			def = `""`
		}
		fmt.Fprintf(w, "  %-*s = %s\n", width, v.Name, strings.ReplaceAll(def, "\n", " "))
	}
}
