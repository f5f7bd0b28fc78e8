package load

import (
	"context"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// ClosedLoop is a run of Workers clients that each send one request after
// another.
type ClosedLoop struct {
	Workers int
	// Ramp spreads the workers' starts: worker w starts w·Ramp/Workers after
	// the run does. 0 starts them all at once.
	Ramp time.Duration
	// Duration bounds when requests start, counted from the run's start
	// (ramp included); requests in flight at its end still finish.
	Duration time.Duration
	// Limit caps how many requests start in all; 0 means no cap.
	Limit int
}

// Run sends requests until Duration has passed, Limit requests have started
// or ctx ends. do sends request number seq (0-based, unique across workers)
// for worker w and returns its Sample; Run fills in At. It returns the
// samples in send order and the wall time from the start to the last answer.
func (l ClosedLoop) Run(ctx context.Context, do func(ctx context.Context, w int, seq int64) Sample) ([]Sample, time.Duration) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu  sync.Mutex
		out []Sample
		seq atomic.Int64
		wg  sync.WaitGroup
	)
	start := time.Now()
	stop := start.Add(l.Duration)
	for w := range l.Workers {
		wg.Go(func() {
			var local []Sample
			if delay := l.Ramp * time.Duration(w) / time.Duration(l.Workers); delay > 0 {
				select {
				case <-ctx.Done():
				case <-time.After(delay):
				}
			}
			for ctx.Err() == nil && time.Now().Before(stop) {
				n := seq.Add(1) - 1
				if l.Limit > 0 && n >= int64(l.Limit) {
					break
				}
				at := time.Since(start)
				s := do(ctx, w, n)
				s.At = at
				local = append(local, s)
			}
			mu.Lock()
			out = append(out, local...)
			mu.Unlock()
		})
	}
	wg.Wait()
	sort.Slice(out, func(i, j int) bool { return out[i].At < out[j].At })
	return out, time.Since(start)
}

// OpenLoop is a run of requests sent at Poisson arrivals, whatever the
// server does.
type OpenLoop struct {
	Rate        float64       // mean arrivals per second; must be > 0 and finite
	Duration    time.Duration // arrival window
	MaxInFlight int           // outstanding requests beyond which arrivals are dropped; must be >= 1
	Seed        uint64        // seed of the arrival times
}

// OpenLoopResult is an open-loop run's outcome.
type OpenLoopResult struct {
	Samples []Sample      // in send order
	Offered int           // arrivals
	Dropped int           // arrivals not sent because MaxInFlight requests were outstanding
	Sent    time.Duration // start → last arrival (about Duration, less if ctx ended)
	Wall    time.Duration // start → last answer
}

// Run sends request number seq with do at each arrival of the window, with
// at most MaxInFlight outstanding: an arrival that finds that many is
// dropped on the client side and counted. After the window it waits for the
// outstanding answers (each bounded by the client's timeout). If ctx ends,
// arrivals stop at once.
func (l OpenLoop) Run(ctx context.Context, do func(ctx context.Context, seq int64) Sample) OpenLoopResult {
	rng := rand.New(rand.NewPCG(l.Seed, 0x6f70656e))
	var (
		mu  sync.Mutex
		res OpenLoopResult
		wg  sync.WaitGroup
	)
	sem := make(chan struct{}, l.MaxInFlight)
	start := time.Now()
	next := time.Duration(0)
	timer := time.NewTimer(0)
	<-timer.C
loop:
	for seq := int64(0); ; seq++ {
		next += time.Duration(rng.ExpFloat64() / l.Rate * float64(time.Second))
		if next > l.Duration {
			break
		}
		if wait := time.Until(start.Add(next)); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-ctx.Done():
				timer.Stop()
				break loop
			}
		}
		res.Offered++
		select {
		case sem <- struct{}{}:
		default:
			res.Dropped++
			continue
		}
		at := time.Since(start)
		wg.Go(func() {
			defer func() { <-sem }()
			s := do(ctx, seq)
			s.At = at
			mu.Lock()
			res.Samples = append(res.Samples, s)
			mu.Unlock()
		})
	}
	res.Sent = time.Since(start)
	wg.Wait()
	res.Wall = time.Since(start)
	sort.Slice(res.Samples, func(i, j int) bool { return res.Samples[i].At < res.Samples[j].At })
	return res
}
