package main

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// recorder logs the parts' starts and stops in the order they happen.
type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) add(e string) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// part runs until ctx ends, recording its start and its stop; started is told once it runs.
func (r *recorder) part(name string, started *sync.WaitGroup) part {
	started.Add(1)
	return part{name, func(ctx context.Context) error {
		r.add("start " + name)
		started.Done()
		<-ctx.Done()
		r.add("stop " + name)
		return nil
	}}
}

// The stages of build, by role: the server drains before the router stops, the router
// before the pools, the pools before the key reloader and the backends last.
func gatewayStages(r *recorder, started *sync.WaitGroup, extra ...part) lifecycle {
	return lifecycle{
		{r.part("simulators", started), r.part("fleet", started)},
		{r.part("api keys", started)},
		{r.part("fast pool", started), r.part("slow pool", started)},
		{r.part("router", started)},
		append(stage{r.part("server", started)}, extra...),
	}
}

// stopOrder returns the stage index of each part in the order the parts stopped.
func stopOrder(events []string, stages lifecycle) []int {
	stageOf := map[string]int{}
	for i, st := range stages {
		for _, p := range st {
			stageOf[p.name] = i
		}
	}
	var out []int
	for _, e := range events {
		if name, ok := strings.CutPrefix(e, "stop "); ok {
			out = append(out, stageOf[name])
		}
	}
	return out
}

func TestLifecycleStopsInReverseOrder(t *testing.T) {
	for _, tt := range []struct {
		name    string
		fail    bool // a server-stage part fails instead of ctx ending
		wantErr string
	}{
		{name: "signal"},
		{name: "a part fails", fail: true, wantErr: "sighup reloader: boom"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var r recorder
			var started sync.WaitGroup
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			fail := make(chan struct{})
			extra := part{"sighup reloader", func(ctx context.Context) error {
				select {
				case <-fail:
					return errors.New("boom")
				case <-ctx.Done():
					return nil
				}
			}}
			stages := gatewayStages(&r, &started, extra)
			done := make(chan error, 1)
			go func() { done <- stages.run(ctx, slog.New(slog.DiscardHandler)) }()
			started.Wait()
			if tt.fail {
				close(fail)
			} else {
				cancel()
			}
			err := <-done
			if tt.wantErr != "" {
				require.EqualError(t, err, tt.wantErr)
			} else {
				require.NoError(t, err)
			}
			r.mu.Lock()
			events := slices.Clone(r.events)
			r.mu.Unlock()
			require.Len(t, events, 2*7, "every part started and stopped: %v", events)
			// Stages 4 (server, SIGHUP; the reloader records nothing), 3 (router), 2 (pools),
			// 1 (keys), 0 (simulators, fleet): each stage stopped before the one below it.
			require.Equal(t, []int{4, 3, 2, 2, 1, 0, 0}, stopOrder(events, stages), "%v", events)
			require.Equal(t, "stop server", events[7], "the server drains first: %v", events)
		})
	}
}
