package batcher

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// guard bounds every wait in these tests. It is a failure timeout, never a synchronisation
// delay: tests proceed as soon as the awaited event happens.
const guard = 10 * time.Second

// fakeClock is a manual clock. Timers fire only from Advance.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	clock   *fakeClock
	c       chan time.Time
	at      time.Time
	stopped bool
	fired   bool
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTimer(d time.Duration) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{clock: c, c: make(chan time.Time, 1), at: c.now.Add(d)}
	c.timers = append(c.timers, t)
	c.fireLocked()
	return t
}

// Advance moves time forward and fires the timers that are due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.fireLocked()
}

func (c *fakeClock) fireLocked() {
	for _, t := range c.timers {
		if !t.stopped && !t.fired && !t.at.After(c.now) {
			t.fired = true
			t.c <- c.now
		}
	}
}

// pending returns the number of timers that are armed and have not fired.
func (c *fakeClock) pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, t := range c.timers {
		if !t.stopped && !t.fired {
			n++
		}
	}
	return n
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() bool {
	t.clock.mu.Lock()
	defer t.clock.mu.Unlock()
	was := !t.stopped && !t.fired
	t.stopped = true
	return was
}

// call is one Func invocation held until the test answers it.
type call struct {
	texts   []string
	proceed chan func(texts []string) ([]string, error)
}

// ok answers with upper-cased texts.
func (c call) ok() {
	c.proceed <- func(texts []string) ([]string, error) {
		out := make([]string, len(texts))
		for i, s := range texts {
			out[i] = strings.ToUpper(s)
		}
		return out, nil
	}
}

func (c call) fail(err error) {
	c.proceed <- func([]string) ([]string, error) { return nil, err }
}

func (c call) panic(v any) {
	c.proceed <- func([]string) ([]string, error) { panic(v) }
}

type outcome struct {
	val    string
	timing Timing
	err    error
}

// harness runs a Batcher[string] whose Func blocks until the test answers each call.
type harness struct {
	t       *testing.T
	b       *Batcher[string]
	clock   *fakeClock
	reg     *prometheus.Registry
	calls   chan call
	changed chan struct{}
	stop    context.CancelFunc
	runErr  chan error
	wg      sync.WaitGroup // Submit goroutines
}

// newHarness runs a batcher over cfg with the fake clock; opts' Logger, when set, replaces
// the discarding one.
func newHarness(t *testing.T, cfg Config, opts ...Options) *harness {
	t.Helper()
	h := &harness{
		t:       t,
		clock:   newFakeClock(),
		reg:     prometheus.NewRegistry(),
		calls:   make(chan call),
		changed: make(chan struct{}, 1),
		runErr:  make(chan error, 1),
	}
	fn := func(ctx context.Context, texts []string) ([]string, error) {
		c := call{texts: slices.Clone(texts), proceed: make(chan func([]string) ([]string, error), 1)}
		select {
		case h.calls <- c:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		select {
		case f := <-c.proceed:
			return f(texts)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	o := Options{Clock: h.clock, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Registerer: h.reg}
	for _, extra := range opts {
		if extra.Logger != nil {
			o.Logger = extra.Logger
		}
	}
	b, err := New(cfg, fn, o)
	require.NoError(t, err)
	b.hook = func() {
		select {
		case h.changed <- struct{}{}:
		default:
		}
	}
	h.b = b
	ctx, cancel := context.WithCancel(context.Background())
	h.stop = cancel
	go func() { h.runErr <- b.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-h.runErr:
			require.NoError(t, err)
		case <-time.After(guard):
			t.Error("Run did not return after its context ended")
		}
		h.wg.Wait()
	})
	return h
}

// submit runs SubmitTimed on its own goroutine and returns where its outcome will appear.
func (h *harness) submit(ctx context.Context, text string) <-chan outcome {
	out := make(chan outcome, 1)
	h.wg.Go(func() {
		v, tm, err := h.b.SubmitTimed(ctx, text)
		out <- outcome{v, tm, err}
	})
	return out
}

func (h *harness) submitAll(texts ...string) []<-chan outcome {
	outs := make([]<-chan outcome, len(texts))
	for i, s := range texts {
		outs[i] = h.submit(context.Background(), s)
	}
	return outs
}

// nextCall waits for the next Func invocation.
func (h *harness) nextCall() call {
	h.t.Helper()
	select {
	case c := <-h.calls:
		return c
	case <-time.After(guard):
		h.t.Fatal("no Func call")
		return call{}
	}
}

// noCall asserts no Func invocation is waiting now.
func (h *harness) noCall() {
	h.t.Helper()
	select {
	case c := <-h.calls:
		h.t.Fatalf("unexpected Func call with %q", c.texts)
	default:
	}
}

// waitFor waits until cond, which must read state the dispatcher changes, holds.
func (h *harness) waitFor(what string, cond func() bool) {
	h.t.Helper()
	timeout := time.After(guard)
	for !cond() {
		select {
		case <-h.changed:
		case <-timeout:
			h.t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func (h *harness) waitQueueLen(n int) {
	h.t.Helper()
	h.waitFor("queue length", func() bool { return h.b.QueueLen() == n })
}

// metric returns a counter's or gauge's value, or a histogram's sample count.
func (h *harness) metric(name string) float64 {
	h.t.Helper()
	mfs, err := h.reg.Gather()
	require.NoError(h.t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		m := mf.GetMetric()[0]
		switch {
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue()
		case m.GetHistogram() != nil:
			return float64(m.GetHistogram().GetSampleCount())
		}
	}
	h.t.Fatalf("metric %s not found", name)
	return 0
}

func recv(t *testing.T, ch <-chan outcome) outcome {
	t.Helper()
	select {
	case o := <-ch:
		return o
	case <-time.After(guard):
		t.Fatal("no outcome")
		return outcome{}
	}
}
