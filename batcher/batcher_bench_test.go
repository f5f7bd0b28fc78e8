package batcher

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkSubmitParallel measures the batcher's own overhead: 64 goroutines submit distinct
// texts to a Func that does nothing, so every nanosecond is channel traffic and bookkeeping.
func BenchmarkSubmitParallel(b *testing.B) {
	for _, workers := range []int{1, 4} {
		b.Run("workers="+strconv.Itoa(workers), func(b *testing.B) {
			benchSubmit(b, 64, workers, 0, distinct)
		})
	}
	// Every goroutine asks for the same few texts: most Submits join a slot already in flight.
	b.Run("dedup", func(b *testing.B) {
		benchSubmit(b, 64, 1, 0, func(_, i int) string { return strconv.Itoa(i & 7) })
	})
	// A Func that costs 200µs of CPU per call, like a tiny model: batches fill up while it runs.
	b.Run("func=200us", func(b *testing.B) {
		benchSubmit(b, 64, 1, 200*time.Microsecond, distinct)
	})
}

func distinct(g, i int) string { return strconv.Itoa(g<<32 | i) }

// benchSubmit runs goroutines submitters against a Func that spins for cost per call.
func benchSubmit(b *testing.B, goroutines, workers int, cost time.Duration, text func(g, i int) string) {
	var batches, texts atomic.Int64
	fn := func(_ context.Context, in []string) ([]float32, error) {
		batches.Add(1)
		texts.Add(int64(len(in)))
		for start := time.Now(); time.Since(start) < cost; {
		}
		return make([]float32, len(in)), nil
	}
	cfg := DefaultConfig()
	cfg.Workers = workers
	bt, err := New(cfg, fn, Options{})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var run sync.WaitGroup
	run.Go(func() { _ = bt.Run(ctx) })
	defer func() {
		cancel()
		run.Wait()
	}()

	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	for g := range goroutines {
		n := b.N / goroutines
		if g < b.N%goroutines {
			n++
		}
		wg.Go(func() {
			for i := range n {
				if _, err := bt.Submit(ctx, text(g, i)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "texts/s")
	if n := batches.Load(); n > 0 {
		b.ReportMetric(float64(texts.Load())/float64(n), "texts/batch")
	}
}
