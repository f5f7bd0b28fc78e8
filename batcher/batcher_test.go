package batcher

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func testConfig() Config {
	cfg := DefaultConfig()
	cfg.MaxBatch = 8
	cfg.QueueSize = 16
	return cfg
}

func TestLoneRequestRunsAtOnce(t *testing.T) {
	h := newHarness(t, testConfig())
	out := h.submit(context.Background(), "hello")

	c := h.nextCall() // no clock advance: the window does not hold a lone request
	require.Equal(t, []string{"hello"}, c.texts)
	require.Zero(t, h.clock.pending(), "no MaxWait timer with an idle batcher")
	h.clock.Advance(7 * time.Millisecond)
	c.ok()

	o := recv(t, out)
	require.NoError(t, o.err)
	require.Equal(t, "HELLO", o.val)
	require.Equal(t, Timing{Queue: 0, Inference: 7 * time.Millisecond, BatchSize: 1}, o.timing)
	require.Equal(t, 1.0, h.metric("triage_batcher_batch_size"))
}

func TestArrivalsDuringBatchFormNextBatch(t *testing.T) {
	h := newHarness(t, testConfig())
	first := h.submit(context.Background(), "first")
	c1 := h.nextCall()

	texts := []string{"a", "b", "c", "d", "e"}
	outs := h.submitAll(texts...)
	h.waitQueueLen(5)
	h.noCall()
	require.Zero(t, h.clock.pending(), "with one worker busy there is nothing for a timer to do")
	require.Equal(t, 5.0, h.metric("triage_batcher_queue_depth"))

	h.clock.Advance(10 * time.Millisecond)
	c1.ok()
	require.NoError(t, recv(t, first).err)

	c2 := h.nextCall()
	require.ElementsMatch(t, texts, c2.texts)
	h.waitQueueLen(0)
	h.clock.Advance(3 * time.Millisecond)
	c2.ok()
	for i, out := range outs {
		o := recv(t, out)
		require.NoError(t, o.err)
		require.Equal(t, []string{"A", "B", "C", "D", "E"}[i], o.val)
		require.Equal(t, Timing{Queue: 10 * time.Millisecond, Inference: 3 * time.Millisecond, BatchSize: 5}, o.timing)
	}
	require.Equal(t, 2.0, h.metric("triage_batcher_batch_size"))
	require.Equal(t, 2.0, h.metric("triage_batcher_inference_seconds"))
	require.Equal(t, 6.0, h.metric("triage_batcher_queue_wait_seconds"))
}

func TestMaxBatchRespected(t *testing.T) {
	cfg := testConfig()
	cfg.MaxBatch = 4
	h := newHarness(t, cfg)
	h.submit(context.Background(), "first")
	c1 := h.nextCall()

	outs := h.submitAll("a", "b", "c", "d", "e", "f")
	h.waitQueueLen(6)
	c1.ok()

	c2 := h.nextCall()
	require.Len(t, c2.texts, 4)
	h.waitQueueLen(2)
	c2.ok()

	c3 := h.nextCall()
	require.Len(t, c3.texts, 2)
	require.ElementsMatch(t, []string{"a", "b", "c", "d", "e", "f"}, append(c2.texts, c3.texts...))
	c3.ok()
	for _, out := range outs {
		require.NoError(t, recv(t, out).err)
	}
}

func TestDedupeRunningText(t *testing.T) {
	h := newHarness(t, testConfig())
	o1 := h.submit(context.Background(), "same")
	c := h.nextCall()
	h.clock.Advance(2 * time.Millisecond)
	o2 := h.submit(context.Background(), "same")
	h.waitFor("dedup", func() bool { return h.metric("triage_batcher_dedup_total") == 1 })
	require.Zero(t, h.b.QueueLen(), "a duplicate takes no queue slot")
	h.clock.Advance(3 * time.Millisecond)
	c.ok()

	r1, r2 := recv(t, o1), recv(t, o2)
	require.NoError(t, r1.err)
	require.NoError(t, r2.err)
	require.Equal(t, "SAME", r1.val)
	require.Equal(t, "SAME", r2.val)
	require.Equal(t, Timing{Inference: 5 * time.Millisecond, BatchSize: 1}, r1.timing)
	require.Equal(t, Timing{Inference: 3 * time.Millisecond, BatchSize: 1}, r2.timing, "a joiner waited only for the rest of the batch")
	h.noCall()

	// The slot is gone once delivered: the same text again is a new call.
	o3 := h.submit(context.Background(), "same")
	h.nextCall().ok()
	require.Equal(t, "SAME", recv(t, o3).val)
}

func TestDedupeQueuedText(t *testing.T) {
	h := newHarness(t, testConfig())
	h.submit(context.Background(), "first")
	c1 := h.nextCall()
	outs := h.submitAll("q", "q", "q")
	h.waitFor("dedup", func() bool { return h.metric("triage_batcher_dedup_total") == 2 })
	require.Equal(t, 1, h.b.QueueLen())
	c1.ok()

	c2 := h.nextCall()
	require.Equal(t, []string{"q"}, c2.texts)
	c2.ok()
	for _, out := range outs {
		o := recv(t, out)
		require.NoError(t, o.err)
		require.Equal(t, "Q", o.val)
	}
}

func TestQueueFull(t *testing.T) {
	cfg := testConfig()
	cfg.MaxBatch, cfg.QueueSize = 2, 2
	h := newHarness(t, cfg)
	h.submit(context.Background(), "first")
	c1 := h.nextCall()
	outs := h.submitAll("a", "b")
	h.waitQueueLen(2)

	_, err := h.b.Submit(context.Background(), "c")
	require.ErrorIs(t, err, ErrQueueFull)
	require.Equal(t, 1.0, h.metric("triage_batcher_rejected_total"))

	// Joining a queued or running text needs no space.
	joinQueued := h.submit(context.Background(), "a")
	joinRunning := h.submit(context.Background(), "first")
	h.waitFor("dedup", func() bool { return h.metric("triage_batcher_dedup_total") == 2 })

	c1.ok()
	require.Equal(t, "FIRST", recv(t, joinRunning).val)
	c2 := h.nextCall()
	require.ElementsMatch(t, []string{"a", "b"}, c2.texts)
	c2.ok()
	require.Equal(t, "A", recv(t, joinQueued).val)
	for _, out := range outs {
		require.NoError(t, recv(t, out).err)
	}
}

func TestCancelDropsQueuedText(t *testing.T) {
	h := newHarness(t, testConfig())
	h.submit(context.Background(), "first")
	c1 := h.nextCall()

	ctx, cancel := context.WithCancel(context.Background())
	gone := h.submit(ctx, "abandoned")
	kept := h.submit(context.Background(), "kept")
	h.waitQueueLen(2)

	cancel()
	require.ErrorIs(t, recv(t, gone).err, context.Canceled, "returns before any batch runs")
	h.waitQueueLen(1)

	c1.ok()
	c2 := h.nextCall()
	require.Equal(t, []string{"kept"}, c2.texts, "an abandoned text never reaches Func")
	c2.ok()
	require.Equal(t, "KEPT", recv(t, kept).val)
}

func TestCancelKeepsTextWithOtherWaiters(t *testing.T) {
	h := newHarness(t, testConfig())
	h.submit(context.Background(), "first")
	c1 := h.nextCall()

	ctx, cancel := context.WithCancel(context.Background())
	gone := h.submit(ctx, "shared")
	h.waitQueueLen(1)
	stay := h.submit(context.Background(), "shared")
	h.waitFor("dedup", func() bool { return h.metric("triage_batcher_dedup_total") == 1 })
	cancel()
	require.ErrorIs(t, recv(t, gone).err, context.Canceled)

	c1.ok()
	c2 := h.nextCall()
	require.Equal(t, []string{"shared"}, c2.texts)
	c2.ok()
	require.Equal(t, "SHARED", recv(t, stay).val)
}

func TestCancelWhileRunningDiscardsResult(t *testing.T) {
	h := newHarness(t, testConfig())
	ctx, cancel := context.WithCancel(context.Background())
	out := h.submit(ctx, "slow")
	c := h.nextCall()
	cancel()
	require.ErrorIs(t, recv(t, out).err, context.Canceled, "returns while the batch still runs")
	c.ok()

	// The batcher carries on.
	next := h.submit(context.Background(), "next")
	h.nextCall().ok()
	require.Equal(t, "NEXT", recv(t, next).val)
}

func TestSubmitWithDoneContext(t *testing.T) {
	h := newHarness(t, testConfig())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := h.b.Submit(ctx, "x")
	require.ErrorIs(t, err, context.Canceled)
	h.noCall()
}

func TestFuncErrorGoesToEveryWaiter(t *testing.T) {
	h := newHarness(t, testConfig())
	h.submit(context.Background(), "first")
	c1 := h.nextCall()
	outs := h.submitAll("a", "b", "a")
	h.waitFor("two queued and one dedup", func() bool {
		return h.b.QueueLen() == 2 && h.metric("triage_batcher_dedup_total") == 1
	})
	c1.ok()

	boom := errors.New("encoder exploded")
	h.nextCall().fail(boom)
	for _, out := range outs {
		require.ErrorIs(t, recv(t, out).err, boom)
	}
}

func TestFuncPanicGoesToEveryWaiterAndWorkerSurvives(t *testing.T) {
	logs := &syncWriter{}
	h := newHarness(t, testConfig(), Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	h.submit(context.Background(), "first")
	c1 := h.nextCall()
	outs := h.submitAll("secret-a", "secret-b", "secret-b")
	h.waitFor("two queued and one dedup", func() bool {
		return h.b.QueueLen() == 2 && h.metric("triage_batcher_dedup_total") == 1
	})
	c1.ok()

	h.nextCall().panic("index out of range")
	for _, out := range outs {
		err := recv(t, out).err
		require.ErrorIs(t, err, ErrPanic)
		require.ErrorContains(t, err, "index out of range")
	}
	require.Contains(t, logs.String(), "batcher func panicked")
	require.NotContains(t, logs.String(), "secret", "prompt text is never logged")

	after := h.submit(context.Background(), "after")
	h.nextCall().ok()
	require.Equal(t, "AFTER", recv(t, after).val)
}

func TestFuncWrongResultCount(t *testing.T) {
	h := newHarness(t, testConfig())
	out := h.submit(context.Background(), "x")
	h.nextCall().proceed <- func([]string) ([]string, error) { return nil, nil }
	require.ErrorContains(t, recv(t, out).err, "returned 0 results for 1 texts")
}

func TestRunEndClosesWaiters(t *testing.T) {
	h := newHarness(t, testConfig())
	running := h.submit(context.Background(), "running")
	h.nextCall() // never answered: Run's ctx ends while it runs
	queued := h.submit(context.Background(), "queued")
	h.waitQueueLen(1)

	h.stop()
	require.ErrorIs(t, recv(t, running).err, ErrClosed)
	require.ErrorIs(t, recv(t, queued).err, ErrClosed)
	select {
	case err := <-h.runErr:
		require.NoError(t, err)
		h.runErr <- err // for the cleanup
	case <-time.After(guard):
		t.Fatal("Run did not return")
	}
	_, err := h.b.Submit(context.Background(), "late")
	require.ErrorIs(t, err, ErrClosed)
	require.Zero(t, h.b.QueueLen())
	require.Error(t, h.b.Run(context.Background()), "Run runs once")
}

func TestSubmitBeforeRunWaitsForRun(t *testing.T) {
	b, err := New(testConfig(), func(_ context.Context, texts []string) ([]int, error) {
		return make([]int, len(texts)), nil
	}, Options{})
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan error, 1)
	go func() {
		_, err := b.Submit(ctx, "early")
		got <- err
	}()
	var wg sync.WaitGroup
	wg.Go(func() { _ = b.Run(ctx) })
	select {
	case err := <-got:
		require.NoError(t, err)
	case <-time.After(guard):
		t.Fatal("Submit made before Run never completed")
	}
	cancel()
	wg.Wait()
}

func TestMaxWaitDispatchesSecondBatch(t *testing.T) {
	cfg := testConfig()
	cfg.Workers = 2
	cfg.MaxWait = 50 * time.Millisecond
	h := newHarness(t, cfg)
	h.submit(context.Background(), "first")
	c1 := h.nextCall() // rule (b): idle, runs at once

	outs := h.submitAll("a", "b")
	h.waitFor("two queued and the window armed", func() bool { return h.b.QueueLen() == 2 && h.clock.pending() == 1 })
	h.noCall() // a worker is free, but the batch is neither full nor old

	h.clock.Advance(49 * time.Millisecond)
	h.noCall()
	h.clock.Advance(time.Millisecond)
	c2 := h.nextCall() // rule (c): the oldest waited MaxWait, while the first batch still runs
	require.ElementsMatch(t, []string{"a", "b"}, c2.texts)
	h.waitQueueLen(0)
	c2.ok()
	for _, out := range outs {
		o := recv(t, out)
		require.NoError(t, o.err)
		require.Equal(t, 50*time.Millisecond, o.timing.Queue)
	}
	c1.ok()
}

func TestFullBatchDispatchesAtOnceWithFreeWorker(t *testing.T) {
	cfg := testConfig()
	cfg.Workers = 2
	cfg.MaxBatch = 3
	h := newHarness(t, cfg)
	h.submit(context.Background(), "first")
	c1 := h.nextCall()

	outs := h.submitAll("a", "b", "c", "d")
	c2 := h.nextCall() // rule (a): no clock advance
	require.Len(t, c2.texts, 3)
	// QueueLen is published at the end of a dispatcher round, after the timer is settled, but
	// the Func call above can be seen before the round that made it ends: wait for the round
	// where the straggler is queued and both workers are busy. A timer armed there never goes.
	h.waitFor("the straggler queued and no window to time (both workers busy)", func() bool {
		return h.b.QueueLen() == 1 && h.clock.pending() == 0
	})

	c2.ok()
	// One batch still runs and the straggler is alone: it waits for the window...
	h.waitFor("the window armed", func() bool { return h.clock.pending() == 1 })
	h.noCall()
	// ...until the classifier goes idle, which dispatches it at once (rule b).
	c1.ok()
	c3 := h.nextCall()
	require.Len(t, c3.texts, 1)
	require.ElementsMatch(t, []string{"a", "b", "c", "d"}, append(c2.texts, c3.texts...))
	c3.ok()
	for _, out := range outs {
		require.NoError(t, recv(t, out).err)
	}
}

// TestTakeDropsGoneWaiters covers the path where a caller left but its cancel message was
// skipped: the dispatcher must still not run its text.
func TestTakeDropsGoneWaiters(t *testing.T) {
	b, err := New(testConfig(), func(_ context.Context, texts []string) ([]int, error) {
		return make([]int, len(texts)), nil
	}, Options{})
	require.NoError(t, err)
	d := &dispatcher[int]{b: b, inflight: map[string]*entry[int]{}}

	mk := func(text string) *waiter[int] {
		return &waiter[int]{text: text, reply: make(chan result[int], 1)}
	}
	gone, kept := mk("gone"), mk("kept")
	d.handle(op[int]{w: gone})
	d.handle(op[int]{w: kept})
	require.Equal(t, 2, d.live)

	gone.gone.Store(true)
	bt := d.take()
	require.Equal(t, []string{"kept"}, bt.texts)
	require.Zero(t, d.live)
	require.NotContains(t, d.inflight, "gone")
	require.Contains(t, d.inflight, "kept")

	late := mk("late")
	late.gone.Store(true)
	d.handle(op[int]{w: late})
	require.Zero(t, d.live, "a caller gone before it was seen is not queued")
}

// syncWriter serialises writes from the batch goroutine with reads by the test.
type syncWriter struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// TestMaxQueueDelay: once a batch has shown what a text costs, a text that would wait longer
// than MaxQueueDelay behind the queue is refused at once, while the count limit is far away.
func TestMaxQueueDelay(t *testing.T) {
	cfg := testConfig()
	cfg.MaxBatch, cfg.QueueSize, cfg.MaxQueueDelay = 4, 1000, 250*time.Millisecond
	h := newHarness(t, cfg)

	// No estimate yet: nothing is refused for delay.
	first := h.submit(context.Background(), "warm")
	c := h.nextCall()
	h.clock.Advance(100 * time.Millisecond) // one text took 100ms
	c.ok()
	require.NoError(t, recv(t, first).err)

	// Block a batch, then queue texts behind it: at 100ms a text, the 3rd queued one would
	// wait 300ms > 250ms.
	h.submit(context.Background(), "running")
	running := h.nextCall()
	queued := h.submitAll("q1", "q2")
	h.waitQueueLen(2)
	_, err := h.b.Submit(context.Background(), "q3")
	require.ErrorIs(t, err, ErrQueueFull)
	require.Equal(t, 1.0, h.metric("triage_batcher_rejected_total"))

	running.ok()
	h.nextCall().ok()
	for _, o := range queued {
		require.NoError(t, recv(t, o).err)
	}
}

// TestSubmitWithin: a caller's own bound refuses a text that would be done after it (the work
// left in the running batch, the texts queued ahead and its own inference), which
// MaxQueueDelay would admit; it leaves the other callers to MaxQueueDelay, never refuses a
// join, and an idle batcher takes a text too slow for its bound only as a once-a-second probe.
func TestSubmitWithin(t *testing.T) {
	cfg := testConfig()
	cfg.MaxBatch, cfg.QueueSize, cfg.MaxQueueDelay = 4, 1000, time.Second
	h := newHarness(t, cfg)

	first := h.submit(context.Background(), "warm")
	c := h.nextCall()
	h.clock.Advance(100 * time.Millisecond) // one text took 100ms
	c.ok()
	require.NoError(t, recv(t, first).err)

	h.submit(context.Background(), "running")
	running := h.nextCall()
	// With the running text's 100ms left, a new text would be done after 200ms: too late
	// for a 150ms bound, though nothing is queued.
	_, _, err := h.b.SubmitWithin(context.Background(), "q1", 150*time.Millisecond)
	require.ErrorIs(t, err, ErrQueueFull)
	require.Equal(t, 1.0, h.metric("triage_batcher_rejected_total"))

	// 60ms later the running text has 40ms left: done after 140ms, within 150ms.
	h.clock.Advance(60 * time.Millisecond)
	// within submits in the background; its channel gets SubmitWithin's error.
	within := func(text string, d time.Duration) chan error {
		done := make(chan error, 1)
		go func() {
			_, _, err := h.b.SubmitWithin(context.Background(), text, d)
			done <- err
		}()
		return done
	}
	queued := []chan error{within("q1", 150*time.Millisecond)}
	h.waitQueueLen(1)
	queued = append(queued, within("q2", 250*time.Millisecond)) // 40ms + q1 + itself = 240ms
	h.waitQueueLen(2)
	// q3 would be done after 340ms: too late for 250ms, fine for MaxQueueDelay.
	_, _, err = h.b.SubmitWithin(context.Background(), "q3", 250*time.Millisecond)
	require.ErrorIs(t, err, ErrQueueFull)
	require.Equal(t, 2.0, h.metric("triage_batcher_rejected_total"))
	plain := h.submitAll("q3")
	h.waitQueueLen(3)

	// Joining an identical text in flight is never refused.
	within("q1", time.Millisecond)
	h.waitFor("the join", func() bool { return h.metric("triage_batcher_dedup_total") == 1 })

	running.ok()
	next := h.nextCall()
	require.Equal(t, []string{"q1", "q2", "q3"}, next.texts)
	next.ok()
	for _, q := range queued {
		require.NoError(t, <-q)
	}
	require.NoError(t, recv(t, plain[0]).err)

	// Idle again, but a text takes about 74ms by now: one that must be done within 1ms is
	// refused at once, nothing ahead of it, since it would finish after its caller has gone...
	_, _, err = h.b.SubmitWithin(context.Background(), "slow", time.Millisecond)
	require.ErrorIs(t, err, ErrQueueFull)
	require.Equal(t, 3.0, h.metric("triage_batcher_rejected_total"))
	// ...until a second has passed since the last batch: then one is taken as a probe, so the
	// estimate keeps learning, and the next waits for the following second.
	h.clock.Advance(idleProbeEvery)
	slow := within("slow", time.Millisecond)
	h.nextCall().ok()
	require.NoError(t, <-slow)
	_, _, err = h.b.SubmitWithin(context.Background(), "slow 2", time.Millisecond)
	require.ErrorIs(t, err, ErrQueueFull)
	require.Equal(t, 4.0, h.metric("triage_batcher_rejected_total"))
	// A bound the estimate fits is always taken by an idle batcher.
	fits := within("fits", time.Second)
	h.nextCall().ok()
	require.NoError(t, <-fits)
}
