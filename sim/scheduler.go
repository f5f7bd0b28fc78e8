package sim

import (
	"context"
	"errors"
	"sync"
)

// errQueueFull is returned when every batch slot is taken and the waiting
// queue holds MaxWaiting requests. The handler answers it with 429.
var errQueueFull = errors.New("queue full")

// scheduler hands out batch slots in FIFO order. A request holds a slot
// from the start of its prefill to its last token, and with it the KV
// blocks it reserved; releasing passes both to the head of the queue at
// once, so a slot is never idle while someone waits. Safe for concurrent
// use.
type scheduler struct {
	maxRunning int
	maxWaiting int

	mu      sync.Mutex
	running int
	kvUsed  int       // KV blocks reserved by running requests
	queue   []*waiter // FIFO
}

type waiter struct {
	ready   chan struct{} // closed when the slot is granted
	blocks  int
	granted bool // guarded by scheduler.mu
}

func newScheduler(maxRunning, maxWaiting int) *scheduler {
	return &scheduler{maxRunning: maxRunning, maxWaiting: maxWaiting}
}

// acquire takes a slot and reserves blocks KV blocks, waiting in FIFO order
// while all slots are busy. It returns errQueueFull without waiting when
// the queue is full, and ctx.Err() if ctx ends first (the request then
// holds nothing).
func (s *scheduler) acquire(ctx context.Context, blocks int) error {
	s.mu.Lock()
	if s.running < s.maxRunning && len(s.queue) == 0 {
		s.running++
		s.kvUsed += blocks
		s.mu.Unlock()
		return nil
	}
	if len(s.queue) >= s.maxWaiting {
		s.mu.Unlock()
		return errQueueFull
	}
	w := &waiter{ready: make(chan struct{}), blocks: blocks}
	s.queue = append(s.queue, w)
	s.mu.Unlock()

	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	if w.granted {
		// The slot arrived together with the cancellation: pass it on.
		s.mu.Unlock()
		s.release(blocks)
		return ctx.Err()
	}
	for i, q := range s.queue {
		if q == w {
			s.queue = append(s.queue[:i], s.queue[i+1:]...)
			break
		}
	}
	s.mu.Unlock()
	return ctx.Err()
}

// release frees a slot and the blocks reserved with it.
func (s *scheduler) release(blocks int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kvUsed -= blocks
	if len(s.queue) == 0 {
		s.running--
		return
	}
	w := s.queue[0]
	s.queue[0] = nil
	s.queue = s.queue[1:]
	w.granted = true
	s.kvUsed += w.blocks
	close(w.ready)
}

// state returns the running and waiting counts and the reserved KV blocks.
func (s *scheduler) state() (running, waiting, kvUsed int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running, len(s.queue), s.kvUsed
}
