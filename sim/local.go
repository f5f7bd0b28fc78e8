package sim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"

	"golang.org/x/sync/errgroup"
)

// Local is a set of simulated replicas run in-process, each a real HTTP server on its own
// 127.0.0.1 port: the gateway's built-in pools, and tests.
type Local struct {
	servers []*Server
	lns     []net.Listener
	ids     []string
	log     *slog.Logger
}

// ListenLocal builds n replicas of cfg named "<cfg.Name>-<i>" and seeded cfg.Seed+i (so their
// jitter differs) and opens a listener on 127.0.0.1:0 for each. Nothing is served until Run;
// Close releases the listeners if Run is never called. log nil means discard.
func ListenLocal(cfg Config, n int, log *slog.Logger) (_ *Local, err error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	l := &Local{log: log}
	defer func() {
		if err != nil {
			l.Close()
		}
	}()
	for i := range n {
		rc := cfg
		rc.Name = fmt.Sprintf("%s-%d", cfg.Name, i)
		rc.Seed = cfg.Seed + uint64(i)
		if rc.KVEventsEndpoint != "" {
			if rc.KVEventsEndpoint, err = offsetPort(cfg.KVEventsEndpoint, i); err != nil {
				return nil, fmt.Errorf("sim replica %s: %w", rc.Name, err)
			}
		}
		srv, err := New(rc, Options{Logger: log.With("component", "sim", "replica", rc.Name)})
		if err != nil {
			return nil, err
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			srv.Close()
			return nil, fmt.Errorf("sim replica %s: %w", rc.Name, err)
		}
		l.servers = append(l.servers, srv)
		l.lns = append(l.lns, ln)
		l.ids = append(l.ids, rc.Name)
	}
	return l, nil
}

// Replicas returns each replica's id and base URL ("http://127.0.0.1:port"), in order.
func (l *Local) Replicas() (ids, urls []string) {
	for i, ln := range l.lns {
		ids = append(ids, l.ids[i])
		urls = append(urls, "http://"+ln.Addr().String())
	}
	return ids, urls
}

// EventEndpoints returns where each replica publishes its KV-cache events,
// in order; all "" when Config.KVEventsEndpoint is not set.
func (l *Local) EventEndpoints() []string {
	out := make([]string, len(l.servers))
	for i, s := range l.servers {
		out[i] = s.KVEventsEndpoint()
	}
	return out
}

// offsetPort adds i to the port of a tcp://host:port endpoint; port 0 stays
// 0 (each replica then binds a free port of its own).
func offsetPort(endpoint string, i int) (string, error) {
	host, port, err := net.SplitHostPort(strings.TrimPrefix(endpoint, "tcp://"))
	if err != nil {
		return "", fmt.Errorf("kv_events_endpoint %q: %w", endpoint, err)
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		return "", fmt.Errorf("kv_events_endpoint %q: bad port", endpoint)
	}
	if n != 0 {
		n += i
	}
	return "tcp://" + net.JoinHostPort(host, strconv.Itoa(n)), nil
}

// Run serves every replica until ctx ends, then drains them.
func (l *Local) Run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	for i, srv := range l.servers {
		ln := l.lns[i]
		g.Go(func() error { return srv.Serve(gctx, ln) })
	}
	l.log.Info("simulated replicas serving", "replicas", len(l.servers))
	return g.Wait()
}

// Close releases the listeners of a Local that will not Run.
func (l *Local) Close() error {
	var errs []error
	for i, ln := range l.lns {
		if err := ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, err)
		}
		l.servers[i].Close()
	}
	return errors.Join(errs...)
}
