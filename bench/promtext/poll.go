package promtext

import (
	"context"
	"net/http"
	"time"
)

// Poll scrapes url every interval on a goroutine of its own and calls
// record with each successful scrape and the time since Poll was called. A
// failed scrape is skipped. It polls until ctx ends or stop is called; stop
// waits for the goroutine to end, so once it returns record is not called
// again and whatever record wrote may be read without a lock.
func Poll(ctx context.Context, c *http.Client, url string, interval time.Duration, record func(since time.Duration, s Samples)) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			s, err := Scrape(ctx, c, url)
			if err != nil {
				continue
			}
			record(time.Since(start), s)
		}
	}()
	return func() {
		cancel()
		<-done
	}
}
