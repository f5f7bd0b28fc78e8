// Package mockllm is the mockllm command: an OpenAI-compatible simulated LLM server
// (package sim) behind flags, --help and a container health check. cmd/mockllm runs it;
// so does the triage binary when it is called as mockllm (the image links
// /usr/local/bin/mockllm to triage rather than ship the simulator twice).
//
//	mockllm --preset slow --listen 127.0.0.1:8001 --name slow-0
package mockllm

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
	"syscall"
	"time"

	"github.com/triage-gw/triage/internal/probe"
	"github.com/triage-gw/triage/sim"
)

// Main runs the command with args (without the program name) until SIGINT or SIGTERM and
// returns its exit status: 0, or 1 after logging why it failed.
func Main(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, args, os.Stderr, nil)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		slog.New(slog.NewJSONHandler(os.Stderr, nil)).Error("mockllm failed", "error", err)
		return 1
	}
	return 0
}

type options struct {
	listen      string
	healthcheck bool
	preset      string
	drain       time.Duration
	logLevel    slog.Level
	cfg         sim.Config
}

// run serves until ctx ends. ready, if set, is called with the bound
// address once the listener is open.
func run(ctx context.Context, args []string, stderr io.Writer, ready func(net.Addr)) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if o.healthcheck {
		url, err := probe.URL(o.listen, "/health")
		if err != nil {
			return err
		}
		return probe.Check(ctx, url)
	}
	logger := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: o.logLevel}))
	srv, err := sim.New(o.cfg, sim.Options{Logger: logger, DrainTimeout: o.drain})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return err
	}
	logger.Info("mockllm listening", "addr", ln.Addr().String(), "replica", o.cfg.Name, "model", o.cfg.Model,
		"preset", o.preset, "max_running", o.cfg.MaxRunning, "decode_per_token", o.cfg.DecodePerToken.String())
	if ready != nil {
		ready(ln.Addr())
	}
	if err := srv.Serve(ctx, ln); err != nil {
		return err
	}
	logger.Info("mockllm stopped", "replica", o.cfg.Name)
	return nil
}

// parseFlags reads the flags. Config flags are bound to the fast preset for
// parsing and --help; the ones given explicitly are then applied on top of
// the chosen preset, so --preset slow --max-running 4 is the slow preset
// with 4 slots.
func parseFlags(args []string, out io.Writer) (options, error) {
	fs := flag.NewFlagSet("mockllm", flag.ContinueOnError)
	fs.SetOutput(out)
	var o options
	fs.StringVar(&o.listen, "listen", "127.0.0.1:8000", "address to listen on (port 0 picks a free one)")
	fs.StringVar(&o.preset, "preset", "fast", "latency preset, fast or slow; the other config flags override its values")
	fs.DurationVar(&o.drain, "drain-timeout", 5*time.Second, "on SIGINT/SIGTERM, wait this long for in-flight requests before cutting them")
	fs.BoolVar(&o.healthcheck, "healthcheck", false, "GET /health of the mockllm at --listen (127.0.0.1 for a wildcard host) and exit 0 if it answers 200, else 1: a container health check")
	fs.TextVar(&o.logLevel, "log-level", slog.LevelInfo, "log `level`: debug, info, warn or error")
	parsed := sim.FastPreset()
	parsed.BindFlags(fs)
	fs.Usage = func() { usage(fs, out) }
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	if fs.NArg() > 0 {
		return options{}, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	cfg, err := sim.Preset(o.preset)
	if err != nil {
		return options{}, fmt.Errorf("--preset: %w", err)
	}
	onPreset := flag.NewFlagSet("preset", flag.ContinueOnError)
	cfg.BindFlags(onPreset)
	var errs []error
	fs.Visit(func(f *flag.Flag) {
		if onPreset.Lookup(f.Name) != nil {
			errs = append(errs, onPreset.Set(f.Name, f.Value.String()))
		}
	})
	if err := errors.Join(errs...); err != nil {
		return options{}, err
	}
	o.cfg = cfg
	return o, nil
}

// usage lists every flag with its fast default and, where it differs, the
// slow preset's.
func usage(fs *flag.FlagSet, out io.Writer) {
	fmt.Fprint(out, `Usage: mockllm [flags]

An OpenAI-compatible simulated LLM server: POST /v1/chat/completions,
POST /v1/completions, GET /v1/models, GET /health, GET /metrics.

Flags:
`)
	slowFS := flag.NewFlagSet("slow", flag.ContinueOnError)
	slow := sim.SlowPreset()
	slow.BindFlags(slowFS)
	fs.VisitAll(func(f *flag.Flag) {
		typ, help := flag.UnquoteUsage(f)
		fmt.Fprintf(out, "  --%s %s\n    \t%s (default %q", f.Name, typ, help, f.DefValue)
		if sf := slowFS.Lookup(f.Name); sf != nil && sf.DefValue != f.DefValue {
			fmt.Fprintf(out, "; slow preset %q", sf.DefValue)
		}
		fmt.Fprintln(out, ")")
	})
}
