package batcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	// ErrQueueFull is returned by Submit when QueueSize distinct texts are already waiting, or
	// when the queue ahead would take longer than Config.MaxQueueDelay to clear.
	// Callers should shed load (HTTP 429 with Retry-After) rather than retry at once.
	ErrQueueFull = errors.New("batcher: queue full")
	// ErrClosed is returned by Submit once Run has ended, and to every request still waiting
	// when it ends.
	ErrClosed = errors.New("batcher: closed")
	// ErrPanic wraps the value of a panic recovered from Func; it is delivered to every waiter of
	// that batch.
	ErrPanic = errors.New("batcher: func panicked")
)

// Func runs one batch. It must return exactly one result per text, in order, or an error that
// applies to the whole batch. It must not keep texts after it returns. ctx is Run's context:
// a batch belongs to no single request, so it is cancelled only when the batcher shuts down.
type Func[R any] func(ctx context.Context, texts []string) ([]R, error)

// Timing tells one caller where its time in the batcher went, for Server-Timing headers.
// Queue + Inference is the caller's whole wait, up to dispatch overhead.
type Timing struct {
	// Queue is the time from Submit until the caller's batch started; zero for a caller that
	// joined an identical text already running.
	Queue time.Duration
	// Inference is the time from the later of batch start and Submit until the result.
	Inference time.Duration
	// BatchSize is the number of distinct texts in the caller's batch.
	BatchSize int
}

// Options are a batcher's collaborators. The zero value is usable.
type Options struct {
	// Clock times queue waits and batches and runs the MaxWait timer. Nil means the wall
	// clock.
	Clock Clock
	// Logger receives recovered panics. Nil means slog.Default().
	Logger *slog.Logger
	// Registerer receives the triage_batcher_* metrics. Nil registers them nowhere.
	Registerer prometheus.Registerer
}

// Batcher groups concurrent Submits into batches for Func. See the package documentation for
// the dispatch rule, ownership and lifecycle.
type Batcher[R any] struct {
	cfg   Config
	fn    Func[R]
	clock Clock
	log   *slog.Logger
	m     *metrics

	in       chan op[R]    // Submit → dispatcher: new waiters and cancellations, in order per caller
	closed   chan struct{} // closed when Run stops accepting work
	started  atomic.Bool
	queueLen atomic.Int64 // mirror of dispatcher.live for QueueLen

	// hook, if non-nil, runs on the dispatcher goroutine after every event it handles. Tests use
	// it to wait for a state without sleeping. Set before Run.
	hook func()
}

// New validates cfg and returns a batcher that calls fn. Nothing runs until Run.
func New[R any](cfg Config, fn Func[R], opts Options) (*Batcher[R], error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if fn == nil {
		return nil, errors.New("batcher: nil Func")
	}
	if opts.Clock == nil {
		opts.Clock = realClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	return &Batcher[R]{
		cfg:    cfg,
		fn:     fn,
		clock:  opts.Clock,
		log:    opts.Logger,
		m:      m,
		in:     make(chan op[R], 2*cfg.MaxBatch),
		closed: make(chan struct{}),
	}, nil
}

// op is one message to the dispatcher.
type op[R any] struct {
	w      *waiter[R]
	cancel bool // the waiter's caller has gone
}

// waiter is one Submit call. text, arrived and reply are set before it is sent to the
// dispatcher and never written again; entry belongs to the dispatcher; gone is set by the
// caller when it stops waiting.
type waiter[R any] struct {
	text    string
	within  time.Duration // the caller's own bound on the expected wait; 0: Config.MaxQueueDelay only
	arrived time.Time
	reply   chan result[R] // buffered 1; the dispatcher sends at most once
	entry   *entry[R]
	gone    atomic.Bool
}

type result[R any] struct {
	val    R
	timing Timing
	err    error
}

// Submit classifies text as part of a batch and returns its result. It returns ctx.Err() as
// soon as ctx is done, ErrQueueFull at once when the queue is full, and ErrClosed after Run has
// ended. Before Run starts it waits (bounded by ctx).
func (b *Batcher[R]) Submit(ctx context.Context, text string) (R, error) {
	r, _, err := b.SubmitTimed(ctx, text)
	return r, err
}

// SubmitTimed is Submit that also reports where the time went.
func (b *Batcher[R]) SubmitTimed(ctx context.Context, text string) (R, Timing, error) {
	return b.SubmitWithin(ctx, text, 0)
}

// SubmitWithin is SubmitTimed for a caller that will not wait longer than within: a new text
// is refused at once with ErrQueueFull when it would not be done within, at the recent
// inference time per text: what is left of the batches running, the texts queued ahead of
// it and its own inference. Otherwise its batch would end after its caller has gone, and the
// encoder would have run it for nobody. A text reaching an idle batcher (nothing queued,
// nothing running) is taken when its own inference fits within by the estimate, and
// otherwise only once per second after the last batch ended, as a probe that keeps the
// estimate learning (a machine that got faster). A text joining an identical one in flight is never refused.
// within <= 0 applies MaxQueueDelay alone, as for everyone.
func (b *Batcher[R]) SubmitWithin(ctx context.Context, text string, within time.Duration) (R, Timing, error) {
	var zero R
	if err := ctx.Err(); err != nil {
		return zero, Timing{}, err
	}
	select {
	case <-b.closed:
		return zero, Timing{}, ErrClosed
	default:
	}
	w := &waiter[R]{text: text, within: within, arrived: b.clock.Now(), reply: make(chan result[R], 1)}
	select {
	case b.in <- op[R]{w: w}:
	case <-ctx.Done():
		return zero, Timing{}, ctx.Err()
	case <-b.closed:
		return zero, Timing{}, ErrClosed
	}
	select {
	case r := <-w.reply:
		return r.val, r.timing, r.err
	case <-ctx.Done():
		// The flag alone guarantees the text is not run for nobody: the dispatcher checks it when
		// it forms the batch. The message, sent on the channel that carried the submit (so it
		// arrives after it), frees the queue slot at once; it is skipped rather than waited for
		// when the channel is full or Run has not started, so this return is never delayed.
		w.gone.Store(true)
		select {
		case b.in <- op[R]{w: w, cancel: true}:
		default:
		}
		return zero, Timing{}, ctx.Err()
	case <-b.closed:
		select {
		case r := <-w.reply:
			return r.val, r.timing, r.err
		default:
			return zero, Timing{}, ErrClosed
		}
	}
}

// QueueLen returns the number of distinct texts waiting for a batch (not those running).
func (b *Batcher[R]) QueueLen() int { return int(b.queueLen.Load()) }

// Run dispatches batches until ctx ends. Then it fails every waiting and running request with
// ErrClosed, waits for running Func calls to return (they see ctx cancelled) and returns nil.
// Run may be called once.
func (b *Batcher[R]) Run(ctx context.Context) error {
	if !b.started.CompareAndSwap(false, true) {
		return errors.New("batcher: Run called more than once")
	}
	d := &dispatcher[R]{
		b:        b,
		ctx:      ctx,
		inflight: make(map[string]*entry[R]),
		done:     make(chan *batch[R], b.cfg.Workers),
	}
	return d.run()
}

// exec runs fn on one batch, turning a panic into ErrPanic.
func (b *Batcher[R]) exec(ctx context.Context, texts []string) (res []R, err error) {
	defer func() {
		if p := recover(); p != nil {
			b.log.Error("batcher func panicked", "panic", fmt.Sprint(p), "batch_size", len(texts), "stack", string(debug.Stack()))
			res, err = nil, fmt.Errorf("%w: %v", ErrPanic, p)
		}
	}()
	res, err = b.fn(ctx, texts)
	if err == nil && len(res) != len(texts) {
		return nil, fmt.Errorf("batcher: func returned %d results for %d texts", len(res), len(texts))
	}
	return res, err
}

type entryState uint8

const (
	stateQueued entryState = iota
	stateRunning
	stateDropped // every waiter left while queued; skipped when the next batch is taken
	stateFinished
)

// entry is one distinct text in flight, shared by all its waiters. Dispatcher-owned.
type entry[R any] struct {
	text     string
	enqueued time.Time
	waiters  []*waiter[R]
	state    entryState
}

// batch is one Func call. The dispatcher fills entries, texts and start; the batch goroutine
// fills end, results and err and then hands the batch back on dispatcher.done.
type batch[R any] struct {
	entries    []*entry[R]
	texts      []string
	start, end time.Time
	results    []R
	err        error
}

// dispatcher holds all queue state; only the goroutine in run touches it.
type dispatcher[R any] struct {
	b   *Batcher[R]
	ctx context.Context

	queue    []*entry[R] // FIFO of queued and dropped entries; queue[0] is queued when live > 0
	live     int         // queued (not dropped) entries in queue
	inflight map[string]*entry[R]
	running  int         // batches running
	runs     []*batch[R] // the batches running, for the work they have left
	done     chan *batch[R]
	wg       sync.WaitGroup // batch goroutines

	timer   Timer // armed only while rule (c) could fire
	timerAt time.Time

	// perText is a moving average of inference seconds per text over recent batches, used to
	// estimate how long a new text would wait (Config.MaxQueueDelay). 0 until a batch ends.
	perText float64
	// lastEnd is when the last batch ended (the idle probe's clock).
	lastEnd time.Time
}

// idleProbeEvery is how often an idle batcher takes a text its estimate says is too slow for
// the caller's bound (SubmitWithin), to keep the estimate current.
const idleProbeEvery = time.Second

// perTextSmoothing weights the newest batch in the perText moving average.
const perTextSmoothing = 0.2

func (d *dispatcher[R]) run() error {
	b := d.b
	for {
		var timerC <-chan time.Time
		if d.timer != nil {
			timerC = d.timer.C()
		}
		select {
		case <-d.ctx.Done():
			d.shutdown()
			return nil
		case o := <-b.in:
			d.handle(o)
			// Take what is already buffered before deciding, so a burst arriving at an idle
			// batcher becomes one batch rather than a batch of one and then the rest.
		drain:
			for range cap(b.in) {
				select {
				case o := <-b.in:
					d.handle(o)
				default:
					break drain
				}
			}
		case bt := <-d.done:
			d.finish(bt)
		case <-timerC:
			d.timer = nil
		}
		d.dispatch()
		d.armTimer()
		// The gauge first: QueueLen is what callers (and tests) wait on, so once it shows a
		// round's value, everything else that round published is visible too.
		b.m.depth.Set(float64(d.live))
		b.queueLen.Store(int64(d.live))
		if b.hook != nil {
			b.hook()
		}
	}
}

func (d *dispatcher[R]) handle(o op[R]) {
	w := o.w
	if o.cancel {
		d.cancel(w)
		return
	}
	if w.gone.Load() {
		return // its caller left before we saw it, and the cancel message was skipped
	}
	if e, ok := d.inflight[w.text]; ok {
		e.waiters = append(e.waiters, w)
		w.entry = e
		d.b.m.dedup.Inc()
		return
	}
	if d.live >= d.b.cfg.QueueSize || d.tooSlow(w.within) {
		d.b.m.rejected.Inc()
		w.reply <- result[R]{err: ErrQueueFull}
		return
	}
	e := &entry[R]{text: w.text, enqueued: w.arrived, waiters: []*waiter[R]{w}}
	w.entry = e
	d.inflight[w.text] = e
	d.queue = append(d.queue, e)
	d.live++
}

// tooSlow reports whether a new text would wait longer than MaxQueueDelay (the texts queued
// ahead of it and itself), or be done later than the caller's within (the work left in the
// running batches, the texts queued ahead and itself), at the recent inference cost per text
// shared by the workers. A bounded count alone does not bound latency, since the
// classifier's speed depends on text lengths and the machine.
func (d *dispatcher[R]) tooSlow(within time.Duration) bool {
	if d.perText == 0 {
		return false
	}
	workers := float64(d.b.cfg.Workers)
	if max := d.b.cfg.MaxQueueDelay; max > 0 && d.perText*float64(d.live+1)/workers > max.Seconds() {
		return true
	}
	if within <= 0 {
		return false
	}
	if d.live == 0 && d.running == 0 {
		// Idle: a text that the estimate says cannot be done within is taken only as a
		// probe, once per idleProbeEvery, so the estimate keeps learning (a machine that got
		// faster, shorter texts); the others would finish after their callers had gone.
		return d.perText > within.Seconds() && d.b.clock.Now().Sub(d.lastEnd) < idleProbeEvery
	}
	return (d.runningLeft()+d.perText*float64(d.live+1))/workers > within.Seconds()
}

// runningLeft is the inference seconds the running batches have left by the estimate: each
// batch's texts at the recent cost per text, less the time it has run; never below zero.
func (d *dispatcher[R]) runningLeft() float64 {
	now := d.b.clock.Now()
	left := 0.0
	for _, bt := range d.runs {
		left += max(0, d.perText*float64(len(bt.texts))-now.Sub(bt.start).Seconds())
	}
	return left
}

// cancel forgets a waiter whose caller has gone. A queued text left without waiters is dropped;
// a running one keeps running and its result is discarded.
func (d *dispatcher[R]) cancel(w *waiter[R]) {
	e := w.entry
	if e == nil || e.state == stateFinished || e.state == stateDropped {
		return // already answered or rejected
	}
	for i, x := range e.waiters {
		if x == w {
			e.waiters = append(e.waiters[:i], e.waiters[i+1:]...)
			break
		}
	}
	if len(e.waiters) > 0 || e.state != stateQueued {
		return
	}
	e.state = stateDropped
	delete(d.inflight, e.text)
	d.live--
	d.trimFront()
	// Dropped entries in the middle wait for the next take; compact if they pile up behind a
	// stuck batch.
	if len(d.queue) > 2*d.live+64 {
		kept := d.queue[:0]
		for _, x := range d.queue {
			if x.state == stateQueued {
				kept = append(kept, x)
			}
		}
		clear(d.queue[len(kept):])
		d.queue = kept
	}
}

// trimFront pops dropped entries so that queue[0], if any, is queued.
func (d *dispatcher[R]) trimFront() {
	for len(d.queue) > 0 && d.queue[0].state == stateDropped {
		d.queue[0] = nil
		d.queue = d.queue[1:]
	}
}

// dispatch starts batches while a worker is free and one of the rules holds: (a) a full batch
// is waiting, (b) nothing is running, (c) the oldest text has waited MaxWait.
func (d *dispatcher[R]) dispatch() {
	cfg := d.b.cfg
	for d.running < cfg.Workers && d.live > 0 {
		full := d.live >= cfg.MaxBatch
		idle := d.running == 0
		if !full && !idle && d.b.clock.Now().Before(d.queue[0].enqueued.Add(cfg.MaxWait)) {
			return
		}
		if bt := d.take(); len(bt.entries) > 0 {
			d.launch(bt)
		}
	}
}

// take removes up to MaxBatch queued entries from the front of the queue. An entry whose
// waiters have all gone is dropped here instead of being run, so the batch may be short or,
// if every candidate was abandoned, empty.
func (d *dispatcher[R]) take() *batch[R] {
	n := min(d.live, d.b.cfg.MaxBatch)
	bt := &batch[R]{entries: make([]*entry[R], 0, n), texts: make([]string, 0, n)}
	i := 0
	for ; i < len(d.queue) && len(bt.entries) < n; i++ {
		e := d.queue[i]
		d.queue[i] = nil
		if e.state == stateDropped {
			continue
		}
		d.live--
		e.waiters = slices.DeleteFunc(e.waiters, func(w *waiter[R]) bool { return w.gone.Load() })
		if len(e.waiters) == 0 {
			e.state = stateDropped
			delete(d.inflight, e.text)
			continue
		}
		e.state = stateRunning
		bt.entries = append(bt.entries, e)
		bt.texts = append(bt.texts, e.text)
	}
	d.queue = d.queue[i:]
	d.trimFront()
	return bt
}

func (d *dispatcher[R]) launch(bt *batch[R]) {
	bt.start = d.b.clock.Now()
	for _, e := range bt.entries {
		d.b.m.queueWait.Observe(bt.start.Sub(e.enqueued).Seconds())
	}
	d.b.m.batchSize.Observe(float64(len(bt.entries)))
	d.running++
	d.runs = append(d.runs, bt)
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		bt.results, bt.err = d.b.exec(d.ctx, bt.texts)
		bt.end = d.b.clock.Now()
		d.done <- bt // never blocks: done has a slot per worker
	}()
}

// finish delivers a completed batch to every waiter still there.
func (d *dispatcher[R]) finish(bt *batch[R]) {
	d.running--
	d.runs = slices.DeleteFunc(d.runs, func(r *batch[R]) bool { return r == bt })
	took := bt.end.Sub(bt.start).Seconds()
	d.b.m.inference.Observe(took)
	d.lastEnd = bt.end
	if n := len(bt.texts); n > 0 && bt.err == nil {
		per := took / float64(n)
		if d.perText == 0 {
			d.perText = per
		} else {
			d.perText += perTextSmoothing * (per - d.perText)
		}
	}
	err := bt.err
	if err != nil && d.ctx.Err() != nil && errors.Is(err, d.ctx.Err()) {
		// Run's ctx ended while the batch ran and the Func gave up on it: the waiters are
		// answered as shutdown answers them, whether this batch or Run's exit comes first.
		err = ErrClosed
	}
	for i, e := range bt.entries {
		delete(d.inflight, e.text)
		e.state = stateFinished
		r := result[R]{err: err}
		if err == nil {
			r.val = bt.results[i]
		}
		for _, w := range e.waiters {
			r.timing = timingFor(w.arrived, bt)
			w.reply <- r
		}
		e.waiters = nil
	}
}

func timingFor[R any](arrived time.Time, bt *batch[R]) Timing {
	t := Timing{BatchSize: len(bt.entries)}
	began := bt.start
	if arrived.Before(began) {
		t.Queue = began.Sub(arrived)
	} else {
		began = arrived // joined a running text
	}
	t.Inference = max(bt.end.Sub(began), 0)
	return t
}

// armTimer keeps one timer for rule (c): needed only while a batch runs, a worker is free and
// texts wait. Otherwise rule (a) or (b) already decided.
func (d *dispatcher[R]) armTimer() {
	if d.running == 0 || d.running >= d.b.cfg.Workers || d.live == 0 {
		d.stopTimer()
		return
	}
	at := d.queue[0].enqueued.Add(d.b.cfg.MaxWait)
	if d.timer != nil && d.timerAt.Equal(at) {
		return
	}
	d.stopTimer()
	d.timer = d.b.clock.NewTimer(at.Sub(d.b.clock.Now()))
	d.timerAt = at
}

func (d *dispatcher[R]) stopTimer() {
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
}

// shutdown fails everything still waiting and waits for running batches.
func (d *dispatcher[R]) shutdown() {
	close(d.b.closed)
	d.stopTimer()
	for _, e := range d.inflight {
		e.state = stateFinished
		for _, w := range e.waiters {
			w.reply <- result[R]{err: ErrClosed}
		}
		e.waiters = nil
	}
	clear(d.inflight)
	clear(d.queue)
	d.queue, d.live = nil, 0
	d.b.queueLen.Store(0)
	d.b.m.depth.Set(0)
	d.wg.Wait() // batch goroutines send on the buffered done channel, so they never block here
}
