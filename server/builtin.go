package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"

	"golang.org/x/sync/errgroup"

	"github.com/triage-gw/triage/config"
	"github.com/triage-gw/triage/sim"
	"github.com/triage-gw/triage/upstream"
)

// Builtin is the set of in-process simulated replicas the gateway runs when no pool is
// configured, each a real HTTP server on its own 127.0.0.1 port. It is a Backend: pass it in
// Options.Backends so it starts before and stops after everything else.
type Builtin struct {
	servers []*sim.Server
	lns     []net.Listener
	log     *slog.Logger
}

var _ Backend = (*Builtin)(nil)

// ListenBuiltin opens a listener on 127.0.0.1:0 for every simulated replica described by
// cfg.Sim and points cfg.Pools at them (their model names too, unless set). It changes
// nothing when cfg.Pools already has replicas and then returns nil. Nothing is served until
// Run; Close releases the listeners if Run is never called.
func ListenBuiltin(cfg *config.Config, log *slog.Logger) (*Builtin, error) {
	if !cfg.Pools.Builtin() {
		return nil, nil
	}
	if log == nil {
		log = slog.Default()
	}
	b := &Builtin{log: log}
	fast, err := b.listen(cfg.Sim.Fast, cfg.Sim.FastReplicas)
	if err == nil {
		var slow []upstream.ReplicaConfig
		slow, err = b.listen(cfg.Sim.Slow, cfg.Sim.SlowReplicas)
		cfg.Pools.Slow.Replicas = slow
	}
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("built-in pools: %w", err)
	}
	cfg.Pools.Fast.Replicas = fast
	if cfg.Pools.Fast.Model == "" {
		cfg.Pools.Fast.Model = cfg.Sim.Fast.Model
	}
	if cfg.Pools.Slow.Model == "" {
		cfg.Pools.Slow.Model = cfg.Sim.Slow.Model
	}
	return b, nil
}

// listen starts n listeners for replicas of sc, named "<name>-<i>" and seeded Seed+i so
// their jitter differs.
func (b *Builtin) listen(sc sim.Config, n int) ([]upstream.ReplicaConfig, error) {
	var out []upstream.ReplicaConfig
	for i := range n {
		rc := sc
		rc.Name = fmt.Sprintf("%s-%d", sc.Name, i)
		rc.Seed = sc.Seed + uint64(i)
		srv, err := sim.New(rc, sim.WithLogger(b.log.With("component", "sim")))
		if err != nil {
			return nil, err
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		b.servers = append(b.servers, srv)
		b.lns = append(b.lns, ln)
		out = append(out, upstream.ReplicaConfig{URL: "http://" + ln.Addr().String(), ID: rc.Name})
	}
	return out, nil
}

// Run serves every simulated replica until ctx ends, then drains them.
func (b *Builtin) Run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	for i, srv := range b.servers {
		ln := b.lns[i]
		g.Go(func() error { return srv.Serve(gctx, ln) })
	}
	b.log.Info("built-in simulated pools serving", "replicas", len(b.servers))
	return g.Wait()
}

// Close releases the listeners of a Builtin that will not Run.
func (b *Builtin) Close() error {
	var errs []error
	for _, ln := range b.lns {
		if err := ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
