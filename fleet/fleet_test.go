package fleet

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/internal/redistest"
)

// Three gateways hammer one fleet of 10 slow slots from 8 goroutines each: the slots
// held across the fleet, counted exactly by the test, never exceed 10, and the fleet uses
// most of its slots (the grants follow the demand).
func TestSlotsNeverExceedMaxUnderConcurrency(t *testing.T) {
	r := redistest.Start(t)
	cfg := testFleetConfig(r.URL())
	const max = 10
	var gws []*gateway
	for _, id := range []string{"g0", "g1", "g2"} {
		gws = append(gws, joinFleet(t, cfg, id, max))
	}
	var inFlight, peak, taken, refused atomic.Int64
	deadline := time.Now().Add(2 * time.Second)
	var wg sync.WaitGroup
	for _, g := range gws {
		for w := range 8 {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(w), 7))
				for time.Now().Before(deadline) {
					if !g.slots.TryAcquire() {
						refused.Add(1)
						time.Sleep(time.Millisecond)
						continue
					}
					n := inFlight.Add(1)
					for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
					}
					taken.Add(1)
					time.Sleep(time.Duration(1+rng.IntN(4)) * time.Millisecond)
					inFlight.Add(-1)
					g.slots.Release()
				}
			})
		}
	}
	wg.Wait()
	t.Logf("taken %d, refused %d, peak in flight %d of %d", taken.Load(), refused.Load(), peak.Load(), max)
	require.LessOrEqual(t, peak.Load(), int64(max), "the fleet held more slots than it has")
	require.GreaterOrEqual(t, peak.Load(), int64(max-2), "the fleet should use most of its slots under this demand")
	require.Greater(t, taken.Load(), int64(1000))
	for _, g := range gws {
		a, _ := g.slots.Local()
		require.Zero(t, a)
	}
}

// A gateway that dies holding slots (no sync, no goodbye: kill -9 as Redis sees it) gives
// them back within its lease plus a sync interval.
func TestDeadGatewaysSlotsReturnWithinTheLease(t *testing.T) {
	r := redistest.Start(t)
	cfg := testFleetConfig(r.URL())
	const max = 6
	// The doomed gateway runs no loops: it syncs when it takes slots (top-ups) and never
	// again.
	cfgDead := cfg
	cfgDead.GatewayID = "doomed"
	conn, err := Dial(cfgDead, Options{Logger: slog.New(slog.DiscardHandler), Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	doomed, err := NewSlots(conn, max)
	require.NoError(t, err)
	for doomed.TryAcquire() {
	}
	held, _ := doomed.Local()
	require.Equal(t, max, held, "with the fleet to itself it can take every slot")

	alive := joinFleet(t, cfg, "alive", max)
	require.False(t, alive.slots.TryAcquire(), "every slot is held by the other gateway")
	died := time.Now()
	var back time.Duration
	require.Eventually(t, func() bool {
		if alive.slots.TryAcquire() {
			back = time.Since(died)
			return true
		}
		return false
	}, 5*time.Second, 5*time.Millisecond)
	t.Logf("slots back after %s (lease %s, sync %s)", back, cfg.Slots.LeaseTTL, cfg.Slots.SyncInterval)
	require.Less(t, back, cfg.Slots.LeaseTTL+5*cfg.Slots.SyncInterval+cfg.CommandTimeout)
	require.Eventually(t, func() bool {
		alive.slots.TryAcquire()
		a, _ := alive.slots.Local()
		return a == max
	}, 2*time.Second, 5*time.Millisecond, "every slot is usable again")
}

// A gateway that shuts down gives its grant back at once.
func TestStoppedGatewayGivesItsGrantBack(t *testing.T) {
	r := redistest.Start(t)
	cfg := testFleetConfig(r.URL())
	a := joinFleet(t, cfg, "a", 4)
	for a.slots.TryAcquire() {
	}
	for range 4 {
		a.slots.Release()
	}
	b := joinFleet(t, cfg, "b", 4)
	a.stop()
	require.Eventually(t, func() bool {
		b.slots.TryAcquire()
		n, _ := b.slots.Local()
		return n == 4
	}, 500*time.Millisecond, 5*time.Millisecond)
}

// The load the decision sees is the fleet's: the other gateways' slots (as of their last
// sync) plus this one's.
func TestActiveIsTheFleetsLoad(t *testing.T) {
	r := redistest.Start(t)
	cfg := testFleetConfig(r.URL())
	a, b := joinFleet(t, cfg, "a", 20), joinFleet(t, cfg, "b", 20)
	// Until a gateway's first sync has leased it a share, only its fallback slots (4) are
	// there; on a loaded machine that sync can come after the first acquisitions.
	acquire := func(g *gateway, n int) {
		held := 0
		require.Eventually(t, func() bool {
			for held < n && g.slots.TryAcquire() {
				held++
			}
			return held == n
		}, 2*time.Second, 5*time.Millisecond)
	}
	acquire(a, 5)
	acquire(b, 1)
	require.Eventually(t, func() bool { return b.slots.Active() == 6 && a.slots.Active() == 6 }, 2*time.Second, 5*time.Millisecond)
	require.Equal(t, 20, b.slots.Max())
}

// Cache entries written by one gateway are hits on another, keyed by model version, and a
// lookup of several texts is one round trip.
func TestCacheIsSharedAcrossGateways(t *testing.T) {
	r := redistest.Start(t)
	cfg := testFleetConfig(r.URL())
	a, b := joinFleet(t, cfg, "a", 5), joinFleet(t, cfg, "b", 5)
	a.cache.Set("v1", "write a poem", "value-1")
	a.cache.Set("v1", "classify: cat", "value-2")
	ctx := context.Background()
	require.Eventually(t, func() bool {
		_, f := b.cache.Get(ctx, "v1", []string{"write a poem"})
		return f[0]
	}, 2*time.Second, 5*time.Millisecond)

	before := r.CommandCalls("mget")
	vals, found := b.cache.Get(ctx, "v1", []string{"write a poem", "never seen", "classify: cat"})
	require.Equal(t, []bool{true, false, true}, found)
	require.Equal(t, []string{"value-1", "", "value-2"}, vals)
	require.Equal(t, before+1, r.CommandCalls("mget"), "three lookups, one round trip")

	_, found = b.cache.Get(ctx, "v2", []string{"write a poem"})
	require.False(t, found[0], "another model version never sees these entries")

	ttl, err := r.Command("PTTL", a.cache.key("v1", "write a poem"))
	require.NoError(t, err)
	require.Regexp(t, `^:\d+$`, ttl, "entries expire")
}

// Redis dies mid-run: within a second every gateway is on local state (no Redis call on
// the request path, the grant it had still usable); when Redis is back they rejoin, and no
// slot is leaked across the outage.
func TestRedisOutageFallsBackAndRejoins(t *testing.T) {
	r := redistest.Start(t)
	cfg := testFleetConfig(r.URL())
	a, b := joinFleet(t, cfg, "a", 8), joinFleet(t, cfg, "b", 8)
	require.True(t, a.slots.TryAcquire())
	require.True(t, b.slots.TryAcquire())
	_, aLimit := a.slots.Local()

	r.Stop()
	stopped := time.Now()
	require.Eventually(t, func() bool { return !a.conn.Up() && !b.conn.Up() }, 2*time.Second, 5*time.Millisecond)
	t.Logf("fell back after %s", time.Since(stopped))
	require.Less(t, time.Since(stopped), time.Second+cfg.CommandTimeout, "fall back within 1 s")

	// Local state: the grant held before the outage, no Redis call, nothing blocks.
	start := time.Now()
	_, limit := a.slots.Local()
	require.Equal(t, aLimit, limit, "the grant is kept through the outage")
	got := 0
	for a.slots.TryAcquire() {
		got++
	}
	require.Equal(t, aLimit-1, got)
	_, found := a.cache.Get(context.Background(), "v1", []string{"x"})
	require.False(t, found[0])
	require.Less(t, time.Since(start), 50*time.Millisecond, "no request waits on a dead Redis")
	require.Equal(t, aLimit, a.slots.Max(), "the load is this gateway's own share while down")

	for range got + 1 {
		a.slots.Release()
	}
	r.Start()
	require.Eventually(t, func() bool { return a.conn.Up() && b.conn.Up() }, 2*time.Second, 5*time.Millisecond)
	b.slots.Release()
	// Both have synced again: nothing held, the fleet's accounting agrees.
	require.Eventually(t, func() bool {
		return a.slots.Active() == 0 && b.slots.Active() == 0 && a.slots.syncAge() < 0.2
	}, 3*time.Second, 5*time.Millisecond)
	require.Eventually(t, func() bool {
		active, err := r.Command("HVALS", a.slots.keys[1])
		return err == nil && active == "0,0"
	}, 3*time.Second, 5*time.Millisecond, "both gateways report 0 slots in flight: none leaked")
}

func TestDialUnreachable(t *testing.T) {
	cfg := testFleetConfig("redis://127.0.0.1:1")
	cfg.DialTimeout = 200 * time.Millisecond
	c, err := Dial(cfg, Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err, "not required: start in local mode")
	require.False(t, c.Up())
	b, err := NewSlots(c, 10)
	require.NoError(t, err)
	_, limit := b.Local()
	require.Equal(t, cfg.Slots.FallbackSlots, limit)

	cfg.Required = true
	_, err = Dial(cfg, Options{Logger: slog.New(slog.DiscardHandler)})
	require.ErrorContains(t, err, "fleet.required")
}

func TestConfigValidation(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"no url", func(c *Config) { c.URL = "" }, "fleet.url: required"},
		{"bad scheme", func(c *Config) { c.URL = "http://x:6379" }, "fleet.url: scheme must be redis or rediss"},
		{"unparsable", func(c *Config) { c.URL = "redis://[::1" }, "fleet.url: cannot parse"},
		{"password in url", func(c *Config) { c.URL = "redis://u:secret@x:6379" }, "password_env"},
		{"prefix", func(c *Config) { c.KeyPrefix = "a b" }, "fleet.key_prefix"},
		{"lease too short", func(c *Config) { c.Slots.LeaseTTL = 50 * time.Millisecond }, "fleet.slots.lease_ttl: must be >= 5"},
		{"headroom", func(c *Config) { c.Slots.Headroom = 0 }, "fleet.slots.headroom"},
		{"timeout", func(c *Config) { c.CommandTimeout = 0 }, "fleet.command_timeout: must be > 0"},
		{"load interval", func(c *Config) { c.Affinity.LoadInterval = 0 }, "fleet.affinity.load_interval: must be > 0"},
		{"load expiry", func(c *Config) { c.Affinity.LoadExpiry = 150 * time.Millisecond }, "fleet.affinity.load_expiry: must be >= 2"},
		{"publish queue", func(c *Config) { c.Affinity.PublishQueue = 0 }, "fleet.affinity.publish_queue"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testFleetConfig("redis://127.0.0.1:6379")
			tc.mutate(&cfg)
			err := cfg.Validate()
			require.ErrorContains(t, err, tc.want)
			require.NotContains(t, err.Error(), "secret")
		})
	}
	require.NoError(t, DefaultConfig().Validate(), "off by default and valid")
	c := testFleetConfig("rediss://cache.internal:6380/2")
	require.NoError(t, c.Validate())
}

// After a rejoin a gateway keeps its grant for one lease, whatever its use does meanwhile:
// a dip in use must not shrink the grant until the hold ends (the fleet's slots would stay
// short for the whole lease), and a rise must not grow it.
func TestRejoinHoldsTheGrantAsItIs(t *testing.T) {
	r := redistest.Start(t)
	cfg := testFleetConfig(r.URL())
	cfg.Slots.LeaseTTL = 2 * time.Second // a hold long enough to watch many syncs in it
	a := joinFleet(t, cfg, "a", 12)
	for range 6 {
		require.True(t, a.slots.TryAcquire())
	}
	require.Eventually(t, func() bool { _, l := a.slots.Local(); return l >= 8 }, 2*time.Second, 5*time.Millisecond)

	r.Stop()
	require.Eventually(t, func() bool { return !a.conn.Up() }, 2*time.Second, 5*time.Millisecond)
	// The grant to hold is the one the outage froze: a sync between the growth above and the
	// outage may still have moved it.
	_, held := a.slots.Local()
	r.Start()
	require.Eventually(t, func() bool { return a.conn.Up() }, 2*time.Second, 5*time.Millisecond)
	rejoined := time.Now()
	for range 5 {
		a.slots.Release() // use drops from 6 to 1
	}
	syncs := r.CommandCalls("evalsha") + r.CommandCalls("eval")
	require.Eventually(t, func() bool { return r.CommandCalls("evalsha")+r.CommandCalls("eval") >= syncs+10 }, 2*time.Second, 5*time.Millisecond)
	_, limit := a.slots.Local()
	topups := value(a.conn.m.topups.WithLabelValues("ok")) + value(a.conn.m.topups.WithLabelValues("joined"))
	for a.slots.TryAcquire() {
	}
	n, _ := a.slots.Local()
	if time.Since(rejoined) < cfg.Slots.LeaseTTL {
		require.Equal(t, held, limit, "the grant is kept through the hold")
		require.Equal(t, held, n, "its slots are all usable")
		require.Equal(t, topups, value(a.conn.m.topups.WithLabelValues("ok"))+value(a.conn.m.topups.WithLabelValues("joined")),
			"no top-up while held: it could not raise the grant")
	}
	for range n - 1 {
		a.slots.Release()
	}
	// After the hold the grant follows the use again.
	require.Eventually(t, func() bool { _, l := a.slots.Local(); return l < held }, 5*time.Second, 10*time.Millisecond)
	a.slots.Release()
}
