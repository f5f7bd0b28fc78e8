package decision

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSemaphoreBounds(t *testing.T) {
	s := NewSemaphore(2)
	require.Equal(t, 2, s.Max())
	require.Zero(t, s.Active())
	require.Zero(t, s.Load())

	require.True(t, s.TryAcquire())
	require.InDelta(t, 0.5, s.Load(), 1e-12)
	require.True(t, s.TryAcquire())
	require.False(t, s.TryAcquire(), "full semaphore must refuse, not wait")
	require.Equal(t, 2, s.Active())
	require.Equal(t, 1.0, s.Load())

	s.Release()
	require.Equal(t, 1, s.Active())
	require.True(t, s.TryAcquire())
	s.Release()
	s.Release()
	require.Zero(t, s.Active())
}

func TestSemaphoreReleaseWithoutAcquirePanics(t *testing.T) {
	s := NewSemaphore(1)
	require.PanicsWithValue(t, "decision: Semaphore.Release without a matching TryAcquire", s.Release)
	require.Zero(t, s.Active(), "a refused Release must not change the count")
}

func TestNewSemaphoreRejectsZero(t *testing.T) {
	require.Panics(t, func() { NewSemaphore(0) })
}

func TestSemaphoreConcurrent(t *testing.T) {
	const slots, goroutines, rounds = 5, 16, 500
	s := NewSemaphore(slots)
	var (
		wg      sync.WaitGroup
		holding atomic.Int64
		peak    atomic.Int64
	)
	for range goroutines {
		wg.Go(func() {
			for range rounds {
				if !s.TryAcquire() {
					continue
				}
				h := holding.Add(1)
				for p := peak.Load(); h > p && !peak.CompareAndSwap(p, h); p = peak.Load() {
				}
				holding.Add(-1)
				s.Release()
			}
		})
	}
	wg.Wait()
	require.Zero(t, s.Active())
	require.LessOrEqual(t, peak.Load(), int64(slots))
	require.Positive(t, peak.Load())
}

func BenchmarkSemaphore(b *testing.B) {
	s := NewSemaphore(50)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if s.TryAcquire() {
				s.Release()
			}
		}
	})
}
