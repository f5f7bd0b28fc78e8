package fleet

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/triage-gw/triage/upstream/policy"
)

// Pool is a gateway's replica pool as affinity sees it; *upstream.Pool satisfies it.
type Pool interface {
	// Name is the pool's name, the same on every gateway of the fleet.
	Name() string
	// InFlightByReplica is this gateway's requests in flight per replica ID.
	InFlightByReplica() map[string]int
	// ObservePick applies another gateway's pick to the pool's policy and reports whether it
	// was used.
	ObservePick(o policy.Observation) bool
}

// Affinity makes the gateways' replica policies behave as one: every pick of a prefix-aware
// policy is published and applied by the other gateways to their own copy of the policy
// (policy.Sharer), so a conversation whose turns arrive at different gateways still reaches
// the replica that holds its prefix; and every gateway publishes its requests in flight per
// replica every LoadInterval, which the others add to their candidates' load. It satisfies
// upstream.PickPublisher and upstream.RemoteLoad.
//
// # How
//
// Redis is the transport, never the state: one pub/sub channel per pool
// ("<prefix>:affinity:<pool>"), messages in a compact binary form (see wire.go) that carry
// the sender's gateway id, so a gateway skips its own. The request path makes no Redis call:
// PublishPick queues, a writer publishes whatever has queued in one message per pool, and
// RemoteInFlight reads a map that the receiver replaces when a snapshot arrives or expires.
//
// # Guarantees and their limits
//
//   - Picks are hints, delivered at most once and without order: a pick lost to a full
//     queue, a Redis outage or a gateway that was not yet subscribed costs at most a prefix
//     cache hit (the next turn is routed on local state, and its own pick is shared again).
//   - Another gateway's in-flight counts are at most LoadInterval old plus delivery; a
//     gateway not heard from for LoadExpiry (it died, or its messages stopped) counts 0.
//   - While Redis is down no pick is published (they are dropped and counted), no message is
//     received, and RemoteInFlight reports nothing at once: the policies run on local state.
//     When Redis is back the subscriber subscribes again and sharing resumes; picks made
//     during the outage stay local.
type Affinity struct {
	conn *Conn
	cfg  AffinityConfig

	queue chan queuedPick
	inbox chan inboxMsg

	started atomic.Bool
	pools   map[string]*poolState // by pool name; filled by Attach before Run, read-only after
	byChan  map[string]*poolState // by channel

	subscribed atomic.Bool
}

type queuedPick struct {
	pool string
	o    policy.Observation
}

type inboxMsg struct{ channel, payload string }

// poolState is one pool's share of the fleet: the other gateways' latest load snapshots.
type poolState struct {
	pool    Pool
	channel string

	mu    sync.Mutex
	peers map[string]peerLoad // gateway id → its latest snapshot

	remote atomic.Pointer[map[string]int] // the peers' load summed per replica; read-only
}

type peerLoad struct {
	at   time.Time
	load map[string]int
}

// Bounds on what affinity keeps and sends.
const (
	maxPickBatch = 256  // picks in one message
	maxPeers     = 1024 // gateways remembered per pool
	inboxSize    = 4096 // received messages waiting to be applied
)

// NewAffinity returns affinity over conn; Attach the pools, then Run.
func NewAffinity(conn *Conn) *Affinity {
	a := &Affinity{
		conn:   conn,
		cfg:    conn.cfg.Affinity,
		queue:  make(chan queuedPick, conn.cfg.Affinity.PublishQueue),
		inbox:  make(chan inboxMsg, inboxSize),
		pools:  map[string]*poolState{},
		byChan: map[string]*poolState{},
	}
	conn.m.affinity.Store(a)
	return a
}

// Attach shares p with the fleet. Every pool must be attached before Run and before the
// gateway serves; pool names must be unique.
func (a *Affinity) Attach(p Pool) error {
	if a.started.Load() {
		return errors.New("fleet affinity: Attach after Run")
	}
	name := p.Name()
	if _, dup := a.pools[name]; dup {
		return fmt.Errorf("fleet affinity: pool %q attached twice", name)
	}
	ps := &poolState{pool: p, channel: a.conn.key("affinity", name), peers: map[string]peerLoad{}}
	a.pools[name] = ps
	a.byChan[ps.channel] = ps
	return nil
}

// PublishPick implements upstream.PickPublisher: it queues o for publishing and never
// blocks; while Redis is down, or when the queue is full, o is dropped and counted.
func (a *Affinity) PublishPick(pool string, o policy.Observation) {
	if !a.conn.Up() {
		a.conn.m.affPicksDropped.WithLabelValues("redis_down").Inc()
		return
	}
	select {
	case a.queue <- queuedPick{pool: pool, o: o}:
	default:
		a.conn.m.affPicksDropped.WithLabelValues("queue_full").Inc()
	}
}

// RemoteInFlight implements upstream.RemoteLoad: the other gateways' requests in flight per
// replica of pool as of their latest snapshots, or nil while Redis is down.
func (a *Affinity) RemoteInFlight(pool string) map[string]int {
	if !a.conn.Up() {
		return nil
	}
	ps := a.pools[pool]
	if ps == nil {
		return nil
	}
	if m := ps.remote.Load(); m != nil {
		return *m
	}
	return nil
}

// Run publishes picks and load snapshots, receives the other gateways' and expires stale
// snapshots until ctx ends. Run may be called once.
func (a *Affinity) Run(ctx context.Context) error {
	if !a.started.CompareAndSwap(false, true) {
		return errors.New("fleet affinity: Run called twice")
	}
	var wg sync.WaitGroup
	wg.Go(func() { a.publishLoop(ctx) })
	wg.Go(func() { a.loadLoop(ctx) })
	wg.Go(func() { a.subscribeLoop(ctx) })
	wg.Go(func() { a.inboxLoop(ctx) })
	wg.Wait()
	return nil
}

// safely runs one step of a background loop, logging a panic instead of dying of it.
func (a *Affinity) safely(loop string, step func()) {
	defer func() {
		if v := recover(); v != nil {
			a.conn.log.Error("fleet affinity: recovered panic", "loop", loop, "panic", fmt.Sprint(v))
		}
	}()
	step()
}

// publishLoop publishes queued picks, whatever has queued up in one message per pool.
func (a *Affinity) publishLoop(ctx context.Context) {
	batch := make([]queuedPick, 0, maxPickBatch)
	var buf []byte
	for {
		select {
		case <-ctx.Done():
			return
		case p := <-a.queue:
			batch = append(batch[:0], p)
		}
	fill:
		for len(batch) < maxPickBatch {
			select {
			case p := <-a.queue:
				batch = append(batch, p)
			default:
				break fill
			}
		}
		a.safely("publish", func() { buf = a.publishPicks(ctx, batch, buf) })
	}
}

// publishPicks sends batch as one message per pool in one round trip and returns buf for
// reuse.
func (a *Affinity) publishPicks(ctx context.Context, batch []queuedPick, buf []byte) []byte {
	cl, err := a.conn.get()
	if err != nil {
		a.conn.m.affPicksDropped.WithLabelValues("redis_down").Add(float64(len(batch)))
		return buf
	}
	byPool := map[string][]policy.Observation{}
	for _, p := range batch {
		byPool[p.pool] = append(byPool[p.pool], p.o)
	}
	var cmds rueidis.Commands
	var counts []int
	for pool, obs := range byPool {
		ps := a.pools[pool]
		if ps == nil {
			continue
		}
		buf = encodePicks(buf[:0], a.conn.id, obs)
		cmds = append(cmds, cl.B().Publish().Channel(ps.channel).Message(string(buf)).Build())
		counts = append(counts, len(obs))
		a.conn.m.affBytes.Add(float64(len(buf)))
	}
	a.send(ctx, cl, cmds, "picks", counts)
	return buf
}

// send publishes cmds in one round trip; counts[i] is the picks in cmds[i] (nil for load).
func (a *Affinity) send(ctx context.Context, cl rueidis.Client, cmds rueidis.Commands, kind string, counts []int) {
	if len(cmds) == 0 {
		return
	}
	pctx, cancel := context.WithTimeout(ctx, max(a.conn.cfg.CommandTimeout, a.cfg.LoadInterval))
	defer cancel()
	for i, r := range cl.DoMulti(pctx, cmds...) {
		err := r.Error()
		a.conn.result("affinity_publish", err)
		if err != nil {
			if counts != nil {
				a.conn.m.affPicksDropped.WithLabelValues("publish_error").Add(float64(counts[i]))
			}
			continue
		}
		a.conn.m.affMessages.WithLabelValues("sent", kind).Inc()
		if counts != nil {
			a.conn.m.affPicksSent.Add(float64(counts[i]))
		}
	}
}

// loadLoop publishes this gateway's in-flight counts and expires the others' stale
// snapshots every LoadInterval, whether or not Redis is up.
func (a *Affinity) loadLoop(ctx context.Context) {
	t := time.NewTicker(a.cfg.LoadInterval)
	defer t.Stop()
	var buf []byte
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		a.safely("load", func() {
			now := time.Now()
			for _, ps := range a.pools {
				ps.expire(now, a.cfg.LoadExpiry)
			}
			buf = a.publishLoad(ctx, buf)
		})
	}
}

func (a *Affinity) publishLoad(ctx context.Context, buf []byte) []byte {
	cl, err := a.conn.get()
	if err != nil {
		return buf
	}
	cmds := make(rueidis.Commands, 0, len(a.pools))
	for _, ps := range a.pools {
		buf = encodeLoad(buf[:0], a.conn.id, ps.pool.InFlightByReplica())
		cmds = append(cmds, cl.B().Publish().Channel(ps.channel).Message(string(buf)).Build())
		a.conn.m.affBytes.Add(float64(len(buf)))
	}
	a.send(ctx, cl, cmds, "load", nil)
	return buf
}

// subscribeLoop keeps one subscription to every pool's channel while Redis is up, and
// subscribes again after it was lost (Redis restarted, the connection was replaced).
func (a *Affinity) subscribeLoop(ctx context.Context) {
	if len(a.byChan) == 0 {
		return
	}
	channels := make([]string, 0, len(a.byChan))
	for ch := range a.byChan {
		channels = append(channels, ch)
	}
	retry := time.NewTimer(0)
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-retry.C:
		}
		a.safely("subscribe", func() { a.receive(ctx, channels) })
		retry.Reset(a.conn.cfg.CheckInterval)
	}
}

// receive subscribes and hands every message to the inbox until the subscription ends.
func (a *Affinity) receive(ctx context.Context, channels []string) {
	cl, err := a.conn.get()
	if err != nil {
		return
	}
	hook := rueidis.WithOnSubscriptionHook(ctx, func(s rueidis.PubSubSubscription) {
		if s.Kind == "subscribe" && !a.subscribed.Swap(true) {
			a.conn.log.Info("fleet affinity: subscribed; sharing picks and load with the other gateways", "channels", len(channels))
		}
	})
	err = cl.Receive(hook, cl.B().Subscribe().Channel(channels...).Build(), func(m rueidis.PubSubMessage) {
		// Runs on the client's reader, which also reads the replies to every other command:
		// hand off, never block it.
		select {
		case a.inbox <- inboxMsg{channel: m.Channel, payload: m.Message}:
		default:
			a.conn.m.affIgnored.WithLabelValues("inbox_full").Inc()
		}
	})
	if ctx.Err() != nil {
		a.subscribed.Store(false)
		return
	}
	a.conn.m.errors.WithLabelValues("affinity_subscribe").Inc()
	if a.subscribed.Swap(false) {
		a.conn.log.Warn("fleet affinity: subscription lost; routing on local state until it is back", "err", err)
	}
}

// inboxLoop applies received messages.
func (a *Affinity) inboxLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case m := <-a.inbox:
			a.safely("receive", func() { a.handle(m, time.Now()) })
		}
	}
}

func (a *Affinity) handle(in inboxMsg, now time.Time) {
	ps := a.byChan[in.channel]
	if ps == nil {
		a.conn.m.affIgnored.WithLabelValues("unknown_pool").Inc()
		return
	}
	payload := []byte(in.payload)
	if h, err := decode(payload, true); err == nil && h.sender == a.conn.id {
		a.conn.m.affIgnored.WithLabelValues("own").Inc()
		return
	}
	m, err := decode(payload, false)
	if err != nil || m.sender == "" {
		a.conn.m.affIgnored.WithLabelValues("malformed").Inc()
		return
	}
	switch m.kind {
	case kindPicks:
		a.conn.m.affMessages.WithLabelValues("received", "picks").Inc()
		for _, o := range m.picks {
			if ps.pool.ObservePick(o) {
				a.conn.m.affPicksReceived.WithLabelValues("applied").Inc()
			} else {
				a.conn.m.affPicksReceived.WithLabelValues("ignored").Inc()
			}
		}
	case kindLoad:
		a.conn.m.affMessages.WithLabelValues("received", "load").Inc()
		ps.setPeer(m.sender, m.load, now)
	}
}

// setPeer stores a gateway's latest snapshot and republishes the sum.
func (ps *poolState) setPeer(gw string, load map[string]int, now time.Time) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if _, known := ps.peers[gw]; !known && len(ps.peers) >= maxPeers {
		return
	}
	ps.peers[gw] = peerLoad{at: now, load: load}
	ps.sumLocked()
}

// expire drops the snapshots of gateways not heard from for ttl.
func (ps *poolState) expire(now time.Time, ttl time.Duration) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	n := len(ps.peers)
	maps.DeleteFunc(ps.peers, func(_ string, p peerLoad) bool { return now.Sub(p.at) > ttl })
	if len(ps.peers) != n {
		ps.sumLocked()
	}
}

func (ps *poolState) sumLocked() {
	if len(ps.peers) == 0 {
		ps.remote.Store(nil)
		return
	}
	sum := map[string]int{}
	for _, p := range ps.peers {
		for id, v := range p.load {
			sum[id] += v
		}
	}
	ps.remote.Store(&sum)
}

// freshest returns the number of gateways with a live snapshot in any pool and the age of
// the freshest snapshot (-1 when there is none).
func (a *Affinity) freshest(now time.Time) (peers int, age float64) {
	age = -1
	for _, ps := range a.pools {
		ps.mu.Lock()
		peers = max(peers, len(ps.peers))
		for _, p := range ps.peers {
			if d := now.Sub(p.at).Seconds(); age < 0 || d < age {
				age = d
			}
		}
		ps.mu.Unlock()
	}
	return peers, age
}
