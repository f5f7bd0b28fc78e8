package fleet

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// Slots are the slow slots of a whole fleet: the gateways together never hold more
// than Max slow requests in flight. It satisfies router.SlowSlots.
//
// # How
//
// Redis keeps, per live gateway, its grant (slots it may use) and its slow requests in
// flight, and a lease (expiry) per gateway. Every SyncInterval each gateway runs one Lua
// script that reaps expired gateways, reports its own in-flight count, and asks for a grant
// of what it uses plus some headroom; the script grants at most what the other gateways'
// grants leave free, so the grants never sum above Max. Between syncs a gateway takes and
// frees slots locally, against its grant, with one atomic compare-and-swap: the request path
// makes no Redis call. Only a gateway whose grant is used up while the fleet (as last seen)
// has room makes a synchronous top-up sync, bounded by fleet.command_timeout.
//
// A grant is lowered locally before Redis hears of it and raised only after Redis granted
// it, so the sum of the local limits never exceeds the sum of the grants in Redis.
//
// # Guarantees and their limits
//
//   - Fleet-wide slow in flight ≤ Max, as long as no live gateway goes a whole LeaseTTL
//     without a successful sync (a paused or partitioned gateway is reaped and its slots
//     handed out while its requests still run; once it syncs again its limit drops and it
//     takes no new slot until it is back under its new grant).
//   - A gateway that dies gives its slots back within LeaseTTL + SyncInterval (the next
//     sync of any other gateway after the lease expires reaps it); one that shuts down
//     gives them back at once.
//   - The load the decision sees is (the other gateways' in flight as of the last sync +
//     this gateway's own, exact) / Max: stale by at most SyncInterval plus one round trip
//     for the other gateways' part (triage_fleet_budget_sync_age_seconds).
//   - While Redis is down a gateway keeps the grant it had (so the grants still sum to at
//     most Max) and computes its load from its own share; one that never reached Redis uses
//     FallbackSlots. After rejoining it keeps its grant as it is for one LeaseTTL, so a
//     gateway that has not yet rejoined cannot be crowded out of the slots it still uses,
//     and the fleet's grants still add up to what they were before the outage.
type Slots struct {
	conn *Conn
	cfg  SlotsConfig
	max  int

	// state packs the local limit (high 32 bits) and the slots in use (low 32 bits), so both
	// change in one compare-and-swap.
	state    atomic.Uint64
	others   atomic.Int64 // the other gateways' in flight at the last sync
	othersG  atomic.Int64 // the other gateways' grants at the last sync
	live     atomic.Int64 // live gateways at the last sync, this one included
	lastSync atomic.Int64 // unix nanoseconds of the last successful sync; 0: never
	acquired atomic.Int64 // slots ever taken, for the rate that sizes the headroom
	holding  atomic.Int64 // unix nanoseconds until which the grant is held (holdUntil)

	// syncing is closed when the sync running now ends; nil when none runs. Top-ups that find
	// a sync running wait on it instead of starting another.
	syncing atomic.Pointer[chan struct{}]

	syncMu    sync.Mutex // one sync at a time; guards the fields below
	seenGen   uint64     // Conn generation at the last sync
	holdUntil time.Time  // the grant is kept as it is until then (after a rejoin)
	rateMark  int64      // acquired at the previous sync
	rateAt    time.Time
	lastRate  float64 // slots per second, smoothed

	script *rueidis.Lua
	leave  *rueidis.Lua
	keys   []string
}

// slotsScript: KEYS grant hash, active hash, lease zset; ARGV gateway, active, want,
// lease ms, max. Returns {grant, others' active, others' grants, live gateways}. Redis's own
// clock times the leases, so gateways' clocks may disagree.
const slotsScript = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local gw, active, want, ttl, max = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local dead = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)
for _, d in ipairs(dead) do
  if d ~= gw then
    redis.call('HDEL', KEYS[1], d)
    redis.call('HDEL', KEYS[2], d)
    redis.call('ZREM', KEYS[3], d)
  end
end
local othersGrant, othersActive, live = 0, 0, 1
local grants = redis.call('HGETALL', KEYS[1])
for i = 1, #grants, 2 do
  if grants[i] ~= gw then
    othersGrant = othersGrant + tonumber(grants[i + 1])
    live = live + 1
  end
end
local actives = redis.call('HGETALL', KEYS[2])
for i = 1, #actives, 2 do
  if actives[i] ~= gw then othersActive = othersActive + tonumber(actives[i + 1]) end
end
local free = max - othersGrant
if free < 0 then free = 0 end
local grant = want
if grant > free then grant = free end
redis.call('HSET', KEYS[1], gw, grant)
redis.call('HSET', KEYS[2], gw, active)
redis.call('ZADD', KEYS[3], now + ttl, gw)
return {grant, othersActive, othersGrant, live}
`

const leaveScript = `
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
return 1
`

// NewSlots returns the fleet's max slow slots as this gateway sees it. When Redis is
// up it syncs once before returning, so the gateway starts with a grant; otherwise it starts
// with FallbackSlots. Run keeps it in sync.
func NewSlots(conn *Conn, max int) (*Slots, error) {
	if max < 1 {
		return nil, fmt.Errorf("fleet slots: max must be >= 1, got %d", max)
	}
	b := &Slots{
		conn:   conn,
		cfg:    conn.cfg.Slots,
		max:    max,
		script: rueidis.NewLuaScript(slotsScript),
		leave:  rueidis.NewLuaScript(leaveScript),
		keys:   []string{conn.taggedKey("budget", "grant"), conn.taggedKey("budget", "active"), conn.taggedKey("budget", "lease")},
		rateAt: time.Now(),
	}
	b.state.Store(pack(uint32(min(conn.cfg.Slots.FallbackSlots, max)), 0))
	b.live.Store(1)
	conn.m.slots.Store(b)
	if conn.Up() {
		ctx, cancel := context.WithTimeout(context.Background(), conn.cfg.DialTimeout)
		defer cancel()
		b.syncMu.Lock()
		b.seenGen = conn.generation()
		b.syncMu.Unlock()
		if err := b.sync(ctx); err != nil {
			conn.log.Warn("fleet slots: first sync failed; starting with the fallback slots", "err", err,
				"fallback_slots", conn.cfg.Slots.FallbackSlots)
		}
	}
	return b, nil
}

func pack(limit, active uint32) uint64    { return uint64(limit)<<32 | uint64(active) }
func unpack(s uint64) (limit, active int) { return int(s >> 32), int(uint32(s)) }

// tryLocal takes a slot if the local limit allows.
func (b *Slots) tryLocal() bool {
	for {
		s := b.state.Load()
		limit, active := unpack(s)
		if active >= limit {
			return false
		}
		if b.state.CompareAndSwap(s, pack(uint32(limit), uint32(active+1))) {
			b.acquired.Add(1)
			return true
		}
	}
}

// TryAcquire takes a slot and reports whether it did; it never waits longer than one
// top-up sync (fleet.command_timeout), and makes none while Redis is down, while the fleet
// is full as last seen, or while the grant is held after a rejoin.
func (b *Slots) TryAcquire() bool {
	if b.tryLocal() {
		return true
	}
	if !b.conn.Up() {
		return false
	}
	limit, _ := unpack(b.state.Load())
	if int(b.othersG.Load())+limit >= b.max {
		return false // the fleet had no free slot at the last sync
	}
	if time.Now().UnixNano() < b.holding.Load() {
		return false // the grant is held after a rejoin: a top-up could not raise it
	}
	b.topUp()
	return b.tryLocal()
}

// topUp runs a sync now, or waits for the one already running, bounded by the command
// timeout.
func (b *Slots) topUp() {
	if !b.syncMu.TryLock() {
		b.conn.m.topups.WithLabelValues("joined").Inc()
		if ch := b.syncing.Load(); ch != nil {
			t := time.NewTimer(b.conn.cfg.CommandTimeout)
			defer t.Stop()
			select {
			case <-*ch:
			case <-t.C:
			}
		}
		return
	}
	defer b.syncMu.Unlock()
	ctx, cancel := b.conn.commandContext(context.Background())
	defer cancel()
	if err := b.syncLocked(ctx); err != nil {
		b.conn.m.topups.WithLabelValues("error").Inc()
		return
	}
	b.conn.m.topups.WithLabelValues("ok").Inc()
}

// Release frees a slot taken by TryAcquire. Releasing more than was taken is a caller bug
// that would corrupt the fleet's accounting, so it panics.
func (b *Slots) Release() {
	for {
		s := b.state.Load()
		limit, active := unpack(s)
		if active <= 0 {
			panic("fleet: Slots.Release without a matching TryAcquire")
		}
		if b.state.CompareAndSwap(s, pack(uint32(limit), uint32(active-1))) {
			return
		}
	}
}

// Active is the fleet's slow requests in flight as this gateway sees them: the others' as of
// the last sync plus its own. While Redis is down it is this gateway's own.
func (b *Slots) Active() int {
	_, active := unpack(b.state.Load())
	if !b.conn.Up() {
		return active
	}
	return active + int(b.others.Load())
}

// Max is the fleet's slot count; while Redis is down, this gateway's own limit (its share).
func (b *Slots) Max() int {
	if !b.conn.Up() {
		limit, _ := unpack(b.state.Load())
		return limit
	}
	return b.max
}

// Local returns this gateway's slots in use and its current limit.
func (b *Slots) Local() (active, limit int) {
	limit, active = unpack(b.state.Load())
	return active, limit
}

// Run syncs every SyncInterval until ctx ends, then gives this gateway's grant back.
func (b *Slots) Run(ctx context.Context) error {
	t := time.NewTicker(b.cfg.SyncInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			b.leaveFleet()
			return nil
		case <-t.C:
		}
		if !b.conn.Up() {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, max(b.conn.cfg.CommandTimeout, b.cfg.SyncInterval))
		err := b.sync(sctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			b.conn.log.Debug("fleet slots: sync failed", "err", err)
		}
	}
}

func (b *Slots) sync(ctx context.Context) error {
	b.syncMu.Lock()
	defer b.syncMu.Unlock()
	return b.syncLocked(ctx)
}

// syncLocked reports this gateway's use, asks for use + headroom, and applies the grant.
// Called with syncMu held.
func (b *Slots) syncLocked(ctx context.Context) error {
	done := make(chan struct{})
	b.syncing.Store(&done)
	defer func() {
		b.syncing.Store(nil)
		close(done)
	}()
	cl, err := b.conn.get()
	if err != nil {
		return err
	}
	now := time.Now()
	if g := b.conn.generation(); g != b.seenGen {
		// Down → up since the last sync (or first join after starting in local mode): hold the
		// current limit for one lease so the grants of gateways that have not rejoined yet are
		// not handed out under them.
		b.seenGen = g
		b.holdUntil = now.Add(b.cfg.LeaseTTL)
		b.holding.Store(b.holdUntil.UnixNano())
		b.conn.log.Info("fleet slots: rejoined; holding the current grant for one lease", "lease_ttl", b.cfg.LeaseTTL.String())
	}
	h := b.headroom(now)

	// Lower the local limit first when asking for less, so that the local limits never sum
	// above the grants Redis holds.
	var want, active int
	for {
		s := b.state.Load()
		limit, a := unpack(s)
		want = a + h
		if now.Before(b.holdUntil) {
			// Keep the grant: no raise, so the gateways that have not rejoined yet keep the
			// slots they use; no lowering either, or every dip in use would shrink the grant
			// for the rest of the hold, with no way back up until it ends.
			want = max(limit, a)
		}
		want = min(want, b.max)
		active = a
		if want >= limit || b.state.CompareAndSwap(s, pack(uint32(want), uint32(a))) {
			break
		}
	}
	args := []string{b.conn.id, strconv.Itoa(active), strconv.Itoa(want),
		strconv.FormatInt(b.cfg.LeaseTTL.Milliseconds(), 10), strconv.Itoa(b.max)}
	vals, err := b.script.Exec(ctx, cl, b.keys, args).AsIntSlice()
	b.conn.result("budget", err)
	if err != nil {
		return fmt.Errorf("fleet slots sync: %w", err)
	}
	if len(vals) != 4 {
		return fmt.Errorf("fleet slots sync: script returned %d values, want 4", len(vals))
	}
	grant := int(vals[0])
	for {
		s := b.state.Load()
		_, a := unpack(s)
		if b.state.CompareAndSwap(s, pack(uint32(grant), uint32(a))) {
			break
		}
	}
	b.others.Store(vals[1])
	b.othersG.Store(vals[2])
	b.live.Store(vals[3])
	b.lastSync.Store(time.Now().UnixNano())
	return nil
}

// headroom is the spare slots to ask for: at least the configured minimum, about two sync
// intervals of this gateway's recent slow rate, but beyond the fleet's fair share
// (Max / live gateways) only the minimum. Called with syncMu held.
func (b *Slots) headroom(now time.Time) int {
	n := b.acquired.Load()
	if dt := now.Sub(b.rateAt).Seconds(); dt > 0 {
		r := float64(n-b.rateMark) / dt
		b.lastRate = 0.5*b.lastRate + 0.5*r
	}
	b.rateMark, b.rateAt = n, now
	h := max(b.cfg.Headroom, int(math.Ceil(2*b.lastRate*b.cfg.SyncInterval.Seconds())))
	_, active := unpack(b.state.Load())
	fair := int(math.Ceil(float64(b.max) / float64(max(b.live.Load(), 1))))
	if active+h > fair {
		h = max(b.cfg.Headroom, fair-active)
	}
	return h
}

// leaveFleet removes this gateway's grant so its slots return at once.
func (b *Slots) leaveFleet() {
	cl, err := b.conn.get()
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.conn.cfg.DialTimeout)
	defer cancel()
	if err := b.leave.Exec(ctx, cl, b.keys, []string{b.conn.id}).Error(); err != nil {
		b.conn.log.Warn("fleet slots: could not give the grant back; it expires with its lease", "err", err)
	}
}

// syncAge is the time since the last successful sync, or -1 before the first.
func (b *Slots) syncAge() float64 {
	ns := b.lastSync.Load()
	if ns == 0 {
		return -1
	}
	return time.Since(time.Unix(0, ns)).Seconds()
}
