// Package gatewayproc runs the gateway (bin/triage) as a child process for the benchmarks:
// on a free 127.0.0.1 port, with a config file or --simulate, its output in a log file, ready
// once /readyz answers 200; it scrapes its /metrics and stops it with SIGTERM, then SIGKILL.
// The process handling itself is internal/childproc's.
package gatewayproc

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/triage-gw/triage/bench/load"
	"github.com/triage-gw/triage/bench/promtext"
	"github.com/triage-gw/triage/internal/childproc"
)

// stopGrace is how long a gateway gets to drain after SIGTERM before it is killed.
const stopGrace = 20 * time.Second

// Config says which gateway binary to start, where, and how long it may take to be ready.
type Config struct {
	Bin            string
	Workdir        string
	StartupTimeout time.Duration
}

// Gateway is a gateway child process.
type Gateway struct {
	p       *childproc.Proc
	Base    string // http://127.0.0.1:port
	LogPath string
	Startup time.Duration // start to ready
	Client  *http.Client  // for readiness, metrics and idleness probes
}

// Start starts the gateway on a free 127.0.0.1 port with configPath (none: built-in
// defaults with the simulated pools, --simulate) and waits for /readyz.
func Start(ctx context.Context, c Config, configPath, logPath string) (*Gateway, error) {
	addr, err := childproc.FreeAddr()
	if err != nil {
		return nil, err
	}
	args := []string{"--listen", addr}
	if configPath != "" {
		args = append(args, "--config", configPath)
	} else {
		args = append(args, "--simulate")
	}
	start := time.Now()
	p, err := childproc.Start(c.Bin, args, childproc.Options{Dir: c.Workdir, LogPath: logPath})
	if err != nil {
		return nil, err
	}
	g := &Gateway{p: p, Base: "http://" + addr, LogPath: logPath, Client: load.NewClient(4, 5*time.Second)}
	err = childproc.WaitFor(ctx, p, c.StartupTimeout, 200*time.Millisecond, "gateway",
		func() bool { return childproc.HTTPOK(ctx, g.Client, g.Base+"/readyz") })
	switch {
	case err == nil:
		g.Startup = time.Since(start)
		return g, nil
	case !p.Alive():
		return nil, fmt.Errorf("gateway exited before ready (%v); last log lines:\n%s", p.Err(), p.Tail(20))
	case ctx.Err() != nil:
		g.Stop()
		return nil, ctx.Err()
	}
	g.Stop()
	return nil, fmt.Errorf("gateway not ready after %s; last log lines:\n%s", c.StartupTimeout, p.Tail(20))
}

// Pid is the gateway's process id (its CPU time is in /proc/<pid>/stat).
func (g *Gateway) Pid() int { return g.p.Pid() }

// Alive reports whether the gateway process still runs.
func (g *Gateway) Alive() bool { return g.p.Alive() }

// Kill kills the gateway with SIGKILL (no drain, no goodbye to Redis) and waits for it.
func (g *Gateway) Kill() { g.p.Kill() }

// Metrics scrapes the gateway's /metrics.
func (g *Gateway) Metrics(ctx context.Context) (promtext.Samples, error) {
	return promtext.Scrape(ctx, g.Client, g.Base+"/metrics")
}

// PollMetrics scrapes the gateway's /metrics every interval until stop is called (see
// promtext.Poll).
func (g *Gateway) PollMetrics(ctx context.Context, interval time.Duration, record func(since time.Duration, m promtext.Samples)) (stop func()) {
	return promtext.Poll(ctx, g.Client, g.Base+"/metrics", interval, record)
}

// WaitIdle waits until the gateway reports no request in flight but the scrape itself, so
// one scenario's stragglers do not load the next.
func (g *Gateway) WaitIdle(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		m, err := g.Metrics(ctx)
		if err == nil && m.Get("triage_inflight_requests") <= 1 {
			return nil
		}
		if !g.Alive() {
			return fmt.Errorf("gateway exited; see %s", g.LogPath)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("gateway still busy after %s (last scrape error: %v)", limit, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// Stop sends SIGTERM, waits up to 20 s for a graceful exit, then kills; it reports a kill or
// a non-zero exit.
func (g *Gateway) Stop() error {
	if err := g.p.Stop(stopGrace); err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	return nil
}
