package sim

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// enqueue starts an acquire in the background and waits until it is
// queued (or has failed). The result arrives on the returned channel.
func enqueue(t *testing.T, s *scheduler, ctx context.Context, blocks, wantWaiting int) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- s.acquire(ctx, blocks) }()
	require.Eventually(t, func() bool { _, w, _ := s.state(); return w == wantWaiting }, 5*time.Second, time.Millisecond)
	return done
}

func TestSchedulerFIFO(t *testing.T) {
	s := newScheduler(1, 2)
	ctx := context.Background()
	require.NoError(t, s.acquire(ctx, 3))
	b := enqueue(t, s, ctx, 5, 1)
	c := enqueue(t, s, ctx, 7, 2)
	assert.ErrorIs(t, s.acquire(ctx, 1), errQueueFull)

	s.release(3)
	require.NoError(t, <-b)
	running, waiting, kv := s.state()
	assert.Equal(t, [3]int{1, 1, 5}, [3]int{running, waiting, kv}, "the slot went to b, the first in line")
	select {
	case <-c:
		t.Fatal("c got a slot out of turn")
	default:
	}
	s.release(5)
	require.NoError(t, <-c)
	s.release(7)
	running, waiting, kv = s.state()
	assert.Equal(t, [3]int{0, 0, 0}, [3]int{running, waiting, kv})
}

func TestSchedulerNoQueue(t *testing.T) {
	s := newScheduler(2, 0)
	ctx := context.Background()
	require.NoError(t, s.acquire(ctx, 0))
	require.NoError(t, s.acquire(ctx, 0))
	assert.ErrorIs(t, s.acquire(ctx, 0), errQueueFull)
}

func TestSchedulerCancelWhileWaiting(t *testing.T) {
	s := newScheduler(1, 4)
	require.NoError(t, s.acquire(context.Background(), 1))
	ctx, cancel := context.WithCancel(context.Background())
	gone := enqueue(t, s, ctx, 2, 1)
	next := enqueue(t, s, context.Background(), 3, 2)
	cancel()
	assert.ErrorIs(t, <-gone, context.Canceled)
	_, waiting, _ := s.state()
	assert.Equal(t, 1, waiting, "the cancelled request left the queue")

	s.release(1)
	require.NoError(t, <-next)
	running, waiting, kv := s.state()
	assert.Equal(t, [3]int{1, 0, 3}, [3]int{running, waiting, kv})
}
