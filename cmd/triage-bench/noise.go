package main

import (
	"context"
	"time"

	"github.com/triage-gw/triage/bench/stats"
)

// noiseProbe measures how late this process's timers fire while a
// benchmark runs: on a shared, loaded machine every simulated delay and
// every measured latency stretches by about as much, so reports carry it.
type noiseProbe struct {
	late []time.Duration
	done chan struct{}
}

// startNoiseProbe wakes every 10 ms until ctx ends; stop returns the
// summary of how late each wake-up was.
func startNoiseProbe(ctx context.Context) (stop func() stats.Summary) {
	ctx, cancel := context.WithCancel(ctx)
	p := &noiseProbe{done: make(chan struct{})}
	const every = 10 * time.Millisecond
	go func() {
		defer close(p.done)
		for {
			want := time.Now().Add(every)
			t := time.NewTimer(every)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
				p.late = append(p.late, max(0, time.Since(want)))
			}
		}
	}()
	return func() stats.Summary {
		cancel()
		<-p.done
		return stats.Summarize(p.late)
	}
}
