package report

import (
	"context"
	"time"

	"github.com/triage-gw/triage/bench/stats"
)

// timerProbe measures how late this process's timers fire while a
// benchmark runs: on a shared, loaded machine every simulated delay and
// every measured latency stretches by about as much, so reports carry it.
type timerProbe struct {
	late []time.Duration
	done chan struct{}
}

// StartTimerProbe measures the machine's scheduling noise: a goroutine sets
// a 10 ms timer, again and again, until ctx ends or stop is called. stop
// waits for the goroutine and returns the summary, in milliseconds, of how
// late each timer fired.
func StartTimerProbe(ctx context.Context) (stop func() stats.Summary) {
	ctx, cancel := context.WithCancel(ctx)
	p := &timerProbe{done: make(chan struct{})}
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
