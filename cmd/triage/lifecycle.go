package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
)

// part is one long-lived piece of the gateway: run serves until its context ends and returns
// after every goroutine it started. A part that returns nil early (the key reloader without
// a keys file) has simply stopped; one that returns an error shuts the gateway down.
type part struct {
	name string
	run  func(ctx context.Context) error
}

// stage is parts started together and stopped together.
type stage []part

// lifecycle is the gateway's start and stop order, in one place: the stages start first to
// last and stop last to first, each stage's context cancelled and its parts awaited before
// the stage below it is stopped. build fills it as
//
//  1. backends: the built-in simulators and the fleet (its slow slots and its grant), which
//     requests drained later may still reach; stopped last;
//  2. the API-key reloader;
//  3. the fast and the slow pool;
//  4. the router (the batcher, then the model once its last batch is done);
//  5. the HTTP server and the SIGHUP reloader; stopping the server drops readiness, stops
//     accepting and drains the requests in flight (server.shutdown_timeout) before it
//     returns, so nothing below it stops under a request.
type lifecycle []stage

// run starts every stage and serves until ctx ends or a part fails, then stops the stages in
// reverse order. It returns the first failure, after every part has returned.
func (l lifecycle) run(ctx context.Context, log *slog.Logger) error {
	n := 0
	for _, st := range l {
		n += len(st)
	}
	failed := make(chan error, n)
	stops := make([]func(), len(l))
	for i, st := range l {
		// Detached from ctx: a stage stops when its turn comes, not when the signal arrives.
		sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		var wg sync.WaitGroup
		for _, p := range st {
			wg.Go(func() {
				if err := p.run(sctx); err != nil {
					failed <- fmt.Errorf("%s: %w", p.name, err)
				}
			})
		}
		stops[i] = func() { cancel(); wg.Wait() }
	}
	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-failed:
		log.Error("shutting down after a failure", "err", runErr)
	}
	for i := len(stops) - 1; i >= 0; i-- {
		stops[i]()
	}
	close(failed)
	for err := range failed {
		if runErr == nil {
			runErr = err
		}
	}
	log.Info("shutdown complete")
	return runErr
}
