package kvevents

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Reconnect backoff of connect mode: doubled after each failure from
// minBackoff, capped at maxBackoff, reset once a connection has carried a
// message.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
)

// maxBindConns bounds the publishers connected at once in bind mode (an
// engine with data-parallel ranks connects once per rank).
const maxBindConns = 16

// maxRanks bounds the data-parallel ranks whose sequence numbers are
// tracked; higher ranks share the last slot.
const maxRanks = 64

// Subscriber follows one replica's KV-cache events and keeps its index of
// the blocks the replica's engine holds. Build it with NewSubscriber, run it
// with Run; Leading, Live and Expect may be called from any goroutine
// whether or not Run is running (without Run the replica is never Live).
type Subscriber struct {
	pool, replica string
	cfg           Config
	addr          string
	lim           Limits
	staleAfter    time.Duration
	pendingTTL    time.Duration
	now           func() time.Time
	log           *slog.Logger
	baseLog       *slog.Logger
	running       atomic.Bool
	// discover is Options.Discover when cfg has no endpoint; cfg, addr and
	// log are then set by Run's goroutine, the only one that reads them.
	discover        func(ctx context.Context) (Config, error)
	lastDiscoverErr string

	idx     *index
	handled func() // Options.Handled

	// seq is the latest sequence number per data-parallel rank; seqMu is
	// held across a whole batch so that batches apply in order.
	seqMu   sync.Mutex
	seq     [maxRanks]uint64
	seqSeen [maxRanks]bool

	conns      atomic.Int32
	everUp     atomic.Bool
	downSince  atomic.Int64 // unix nanos when the last connection closed
	lastBatch  atomic.Int64 // unix nanos of the latest batch; 0 before any
	awaitSince atomic.Int64 // unix nanos of the oldest pick for new blocks not followed by a batch; 0 none

	m struct {
		received                                              [4]prometheus.Counter
		batches, decodeErr, gaps, missed, restarts, replayed  prometheus.Counter
		dropSize, dropTokens, dropOrphan, dropCap, dropMedium prometheus.Counter
		dropGroup, dropPending                                prometheus.Counter
		blocks, connected, lastEvent                          prometheus.Gauge
		fallDown, fallSilent, fallNoBlock                     prometheus.Counter
	}
}

// NewSubscriber validates cfg and lim and builds a replica's subscriber.
// reg receives the triage_upstream_kv_events_* series (nil: a private
// registry); log nil means slog.Default(). Its records name the replica and
// the endpoint; the caller's logger names the pool if it should.
func NewSubscriber(pool, replica string, cfg Config, lim Limits, opts Options, reg prometheus.Registerer, log *slog.Logger) (*Subscriber, error) {
	if lim == (Limits{}) {
		lim = DefaultLimits()
	}
	if err := errors.Join(cfg.ValidateAt("kv_events"), lim.ValidateAt("kv_events")); err != nil {
		return nil, err
	}
	if cfg.Endpoint == "" && opts.Discover == nil {
		return nil, errors.New("kv_events.endpoint: required (tcp://host:port)")
	}
	addr, _ := cfg.address()
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	s := &Subscriber{
		pool: pool, replica: replica, cfg: cfg, addr: addr, lim: lim,
		staleAfter: opts.StaleAfter, pendingTTL: opts.PendingTTL, now: opts.Now, handled: opts.Handled,
		log: log.With("replica", replica, "kv_events", cfg.Endpoint), baseLog: log.With("replica", replica),
		idx: newIndex(lim.MaxBlocks, lim.MaxPendingBlocks),
	}
	if s.staleAfter <= 0 {
		s.staleAfter = 10 * time.Second
	}
	if s.pendingTTL <= 0 {
		s.pendingTTL = 2 * time.Second
	}
	if s.now == nil {
		s.now = time.Now
	}
	if cfg.Endpoint == "" {
		s.discover = opts.Discover
	}
	l := prometheus.Labels{"pool": pool, "replica": replica}
	for i, t := range [4]string{typeUnknown, typeStored, typeRemoved, typeCleared} {
		s.m.received[i] = m.received.MustCurryWith(l).WithLabelValues(t)
	}
	s.m.batches = m.batches.With(l)
	s.m.decodeErr = m.decodeErr.With(l)
	s.m.gaps, s.m.missed, s.m.restarts = m.gaps.With(l), m.missed.With(l), m.restarts.With(l)
	s.m.replayed = m.replayed.With(l)
	drop := m.dropped.MustCurryWith(l)
	s.m.dropSize, s.m.dropTokens = drop.WithLabelValues(dropMessageSize), drop.WithLabelValues(dropTokenCap)
	s.m.dropOrphan, s.m.dropCap = drop.WithLabelValues(dropOrphan), drop.WithLabelValues(dropCapacity)
	s.m.dropMedium, s.m.dropGroup = drop.WithLabelValues(dropOtherMedium), drop.WithLabelValues(dropOtherGroup)
	s.m.dropPending = drop.WithLabelValues(dropPending)
	s.m.blocks, s.m.connected, s.m.lastEvent = m.blocks.With(l), m.connected.With(l), m.lastEvent.With(l)
	fall := m.fallbacks.MustCurryWith(l)
	s.m.fallDown, s.m.fallSilent, s.m.fallNoBlock = fall.WithLabelValues(fallbackDown), fall.WithLabelValues(fallbackSilent), fall.WithLabelValues(fallbackNoBlock)
	return s, nil
}

// Replica returns the replica ID the subscriber was built for.
func (s *Subscriber) Replica() string { return s.replica }

// BlockSize returns the engine's block size in tokens, as its latest
// BlockStored said; 0 before any.
func (s *Subscriber) BlockSize() int {
	s.idx.mu.RLock()
	defer s.idx.mu.RUnlock()
	return s.idx.blockSize
}

// Blocks returns the number of blocks indexed.
func (s *Subscriber) Blocks() int {
	s.idx.mu.RLock()
	defer s.idx.mu.RUnlock()
	return s.idx.len()
}

// Leading returns how many of keys, from the first, the replica holds in a
// row: reported stored by its engine, or picked within the pending window.
func (s *Subscriber) Leading(keys []uint64) int { return s.idx.leading(keys, s.now()) }

// Stored returns how many of keys, from the first, the replica's engine has
// reported stored and not removed: Leading without the pending window, the
// engine's own word alone.
func (s *Subscriber) Stored(keys []uint64) int { return s.idx.stored(keys) }

// Live reports whether the replica's events can be trusted now, and counts
// a fallback when not (the caller then uses its own guess for the replica):
// the stream must be up or down for less than StaleAfter, and the replica
// must not have been picked for new blocks StaleAfter ago or more with no
// event since (events that never come — a wrong topic, events not enabled
// on the engine — look like that). A replica never connected is not Live.
func (s *Subscriber) Live() bool {
	switch s.state() {
	case fallbackDown:
		s.m.fallDown.Inc()
		return false
	case fallbackSilent:
		s.m.fallSilent.Inc()
		return false
	}
	return true
}

// Usable is Live without counting a fallback: whether a request's keys are
// worth computing for this replica.
func (s *Subscriber) Usable() bool { return s.state() == "" }

// state is "" when the events can be trusted, else why not.
func (s *Subscriber) state() string {
	now := s.now().UnixNano()
	stale := int64(s.staleAfter)
	switch {
	case !s.everUp.Load() || (s.conns.Load() == 0 && now-s.downSince.Load() >= stale):
		return fallbackDown
	case s.awaitSince.Load() != 0 && now-s.awaitSince.Load() >= stale:
		return fallbackSilent
	}
	return ""
}

// NoteFallback counts a fallback to the guess for a reason of the caller's:
// no block size known, or no tokens for the request.
func (s *Subscriber) NoteFallback() { s.m.fallNoBlock.Inc() }

// Expect records that a request whose block keys are keys was sent to the
// replica: those it does not hold count as held for the pending window, and
// if there were any, the replica is expected to send events.
func (s *Subscriber) Expect(keys []uint64) {
	now := s.now()
	if s.idx.leading(keys, now) == len(keys) {
		return
	}
	s.awaitSince.CompareAndSwap(0, now.UnixNano())
	if !s.idx.expect(keys, now, s.pendingTTL) {
		s.m.dropPending.Inc()
	}
}

// Run connects to (or listens for) the replica's publisher until ctx ends,
// reconnecting with backoff; it returns nil on cancellation, and an error
// only when a bind-mode endpoint cannot be listened on.
func (s *Subscriber) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return fmt.Errorf("kv events %s/%s: Run called twice", s.pool, s.replica)
	}
	if s.discover != nil {
		backoff := minBackoff
		for !s.rediscover(ctx) {
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
			backoff = min(2*backoff, maxBackoff)
		}
	}
	if s.cfg.Mode == ModeBind {
		return s.listen(ctx)
	}
	s.dial(ctx)
	return nil
}

// rediscover asks the engine where it publishes and, when it answers,
// subscribes there from the next dial on. It logs a failure once until the
// error changes, and a new endpoint when it changes. Only Run's goroutine
// calls it.
func (s *Subscriber) rediscover(ctx context.Context) bool {
	cfg, err := s.discover(ctx)
	if err == nil {
		var addr string
		if addr, err = cfg.address(); err == nil && cfg.Mode == ModeBind {
			err = errors.New("discovery gave a bind-mode endpoint")
		}
		if err == nil {
			if cfg != s.cfg {
				s.log = s.baseLog.With("kv_events", cfg.Endpoint)
				s.log.Info("kv events endpoint discovered", "topic", cfg.Topic, "replay_endpoint", cfg.ReplayEndpoint)
			}
			s.cfg, s.addr, s.lastDiscoverErr = cfg, addr, ""
			return true
		}
	}
	if ctx.Err() == nil && err.Error() != s.lastDiscoverErr {
		s.lastDiscoverErr = err.Error()
		s.baseLog.Warn("kv events endpoint not discovered; the replica is routed by the guess until it is", "err", err)
	}
	return false
}

func (s *Subscriber) dial(ctx context.Context) {
	d := net.Dialer{Timeout: handshakeTimeout, KeepAlive: 15 * time.Second}
	backoff := minBackoff
	failing := false
	for ctx.Err() == nil {
		nc, err := d.DialContext(ctx, "tcp", s.addr)
		if err == nil {
			var got bool
			got, err = s.serve(ctx, nc)
			if got {
				backoff = minBackoff
			}
		} else if s.discover != nil {
			// Nobody listens there: the engine may have restarted elsewhere.
			s.rediscover(ctx)
		}
		if ctx.Err() != nil {
			return
		}
		if !failing {
			s.log.Warn("kv events stream down, reconnecting", "err", err)
		}
		failing = err != nil
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

func (s *Subscriber) listen(ctx context.Context) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", s.addr)
	if err != nil {
		return fmt.Errorf("kv events %s/%s: %w", s.pool, s.replica, err)
	}
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	slots := make(chan struct{}, maxBindConns)
	for {
		nc, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("kv events %s/%s: accept: %w", s.pool, s.replica, err)
		}
		select {
		case slots <- struct{}{}:
		default:
			s.log.Warn("kv events: too many publisher connections, refusing one", "max", maxBindConns)
			nc.Close()
			continue
		}
		wg.Go(func() {
			defer func() { <-slots }()
			if _, err := s.serve(ctx, nc); err != nil && ctx.Err() == nil {
				s.log.Warn("kv events publisher connection ended", "remote", nc.RemoteAddr().String(), "err", err)
			}
		})
	}
}

// serve runs one publisher connection until it fails or ctx ends. got
// reports whether any message arrived.
func (s *Subscriber) serve(ctx context.Context, nc net.Conn) (got bool, err error) {
	defer nc.Close()
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	defer stop()
	defer func() {
		if v := recover(); v != nil {
			s.log.Error("recovered panic in kv events connection", "panic", fmt.Sprint(v))
			err = fmt.Errorf("panic: %v", v)
		}
	}()
	c, err := newZConn(nc, s.cfg.Topic, s.lim.MaxMessageBytes)
	if err != nil {
		return false, err
	}
	s.m.connected.Set(float64(s.conns.Add(1)))
	s.everUp.Store(true)
	defer func() {
		s.downSince.Store(s.now().UnixNano())
		s.m.connected.Set(float64(s.conns.Add(-1)))
	}()
	s.log.Info("kv events stream up")
	d := decoder{maxTokens: s.lim.MaxTokensPerEvent}
	for {
		frames, oversize, err := c.next()
		if err != nil {
			return got, err
		}
		got = true
		if oversize {
			s.m.dropSize.Inc()
		} else {
			s.handle(&d, frames)
		}
		if s.handled != nil {
			s.handled()
		}
	}
}

// handle applies one message: [topic, sequence (8 bytes, big-endian),
// payload]. Extra frames are ignored.
func (s *Subscriber) handle(d *decoder, frames [][]byte) {
	if len(frames) < 3 || len(frames[1]) != 8 {
		s.m.decodeErr.Inc()
		return
	}
	seq := binary.BigEndian.Uint64(frames[1])
	b, err := d.header(frames[2])
	if err != nil {
		s.m.decodeErr.Inc()
		return
	}
	now := s.now()
	s.lastBatch.Store(now.UnixNano())
	s.awaitSince.Store(0)
	s.m.batches.Inc()
	s.m.lastEvent.Set(float64(now.UnixNano()) / 1e9)

	s.seqMu.Lock()
	defer s.seqMu.Unlock()
	if r := rankSlot(b.rank); s.cfg.ReplayEndpoint != "" && s.seqSeen[r] && seq > s.seq[r]+1 {
		s.replay(b.rank, s.seq[r]+1, seq)
	}
	s.applyBatch(d, b, seq)
}

// applyBatch applies one decoded batch numbered seq under the index lock.
// Caller holds seqMu.
func (s *Subscriber) applyBatch(d *decoder, b batch, seq uint64) {
	x := s.idx
	x.mu.Lock()
	defer x.mu.Unlock()
	s.sequence(b.rank, seq)
	bad := d.events(b, func(ev *event) { s.apply(ev) })
	if bad > 0 {
		s.m.decodeErr.Add(float64(bad))
	}
	s.m.blocks.Set(float64(x.len()))
}

// replayTimeout bounds one replay: connecting, asking and receiving.
const replayTimeout = 2 * time.Second

// endSeq is the replay socket's end marker, -1 as a big-endian int64.
var endSeq = []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// replay asks the engine's replay socket (a ROUTER; this side is a DEALER)
// for the batches of rank numbered from..to−1 and applies each as it
// arrives, in order, before the batch numbered to. vLLM answers
// [empty, seq, payload] for each buffered batch from `from` on, then
// [empty, -1, empty]. Whatever it cannot deliver within replayTimeout stays
// a gap (counted when the batch numbered to is applied). The index lock is
// taken per batch, never across the network wait. Caller holds seqMu.
func (s *Subscriber) replay(rank int64, from, to uint64) {
	addr, err := (Config{Endpoint: s.cfg.ReplayEndpoint}).address()
	if err != nil {
		return
	}
	d := net.Dialer{Timeout: replayTimeout}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		s.log.Warn("kv events replay unreachable", "err", err)
		return
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(replayTimeout))
	c, err := handshake(nc, "DEALER", s.lim.MaxMessageBytes)
	if err != nil {
		s.log.Warn("kv events replay handshake failed", "err", err)
		return
	}
	if err := c.send(nil, binary.BigEndian.AppendUint64(nil, from)); err != nil {
		return
	}
	dec := decoder{maxTokens: s.lim.MaxTokensPerEvent}
	for {
		frames, oversize, err := c.next()
		if err != nil {
			s.log.Warn("kv events replay cut short", "err", err)
			return
		}
		if oversize {
			s.m.dropSize.Inc()
			continue
		}
		if len(frames) < 3 || len(frames[1]) != 8 || string(frames[1]) == string(endSeq) {
			return
		}
		seq := binary.BigEndian.Uint64(frames[1])
		if seq < from {
			continue
		}
		if seq >= to {
			return
		}
		b, err := dec.header(frames[2])
		if err != nil || b.rank != rank {
			s.m.decodeErr.Inc()
			continue
		}
		s.applyBatch(&dec, b, seq)
		s.m.replayed.Inc()
	}
}

// rankSlot is the sequence slot of a data-parallel rank.
func rankSlot(rank int64) int64 { return min(max(rank, 0), maxRanks-1) }

// sequence checks a batch's sequence number against its rank's previous
// one. A number that went back means the engine restarted (vLLM numbers
// batches from 0 per engine): its cache is empty, so the index is cleared.
// A number that jumped ahead means batches were lost (the publisher's
// high-water mark, or a reconnect); the index is kept — what was lost is
// at worst a few stale or missing blocks, which later events repair, while
// clearing would forget hot prefixes the engine will never announce again
// until it evicts and recomputes them — and the gap is counted. Caller
// holds seqMu and the index lock.
func (s *Subscriber) sequence(rank int64, seq uint64) {
	r := rankSlot(rank)
	last, seen := s.seq[r], s.seqSeen[r]
	s.seq[r], s.seqSeen[r] = seq, true
	switch {
	case !seen || seq == last+1:
	case seq <= last:
		s.m.restarts.Inc()
		s.idx.reset()
		s.log.Info("kv events sequence restarted, index cleared", "rank", rank, "seq", seq, "previous", last)
	default:
		s.m.gaps.Inc()
		s.m.missed.Add(float64(seq - last - 1))
		s.log.Warn("kv events sequence gap", "rank", rank, "missed_batches", seq-last-1)
	}
}

// apply applies one event to the index. Caller holds the index lock.
func (s *Subscriber) apply(ev *event) {
	s.m.received[ev.kind].Inc()
	x := s.idx
	switch ev.kind {
	case kindStored:
		switch {
		case ev.offGPU:
			s.m.dropMedium.Add(float64(len(ev.hashes)))
		case ev.group != 0:
			s.m.dropGroup.Add(float64(len(ev.hashes)))
		case ev.tooManyTokens:
			s.m.dropTokens.Add(float64(len(ev.hashes)))
		default:
			res := x.store(ev)
			s.m.dropOrphan.Add(float64(res.orphaned))
			s.m.dropCap.Add(float64(res.evicted))
		}
	case kindRemoved:
		if ev.offGPU || ev.group != 0 {
			return
		}
		for _, h := range ev.hashes {
			x.remove(h)
		}
	case kindCleared:
		x.reset()
	}
}
