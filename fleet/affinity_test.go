package fleet

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/internal/redistest"
	"github.com/triage-gw/triage/upstream"
	"github.com/triage-gw/triage/upstream/policy"
)

func testAffinityConfig(url string) Config {
	cfg := testFleetConfig(url)
	cfg.Affinity.LoadInterval = 20 * time.Millisecond
	cfg.Affinity.LoadExpiry = 300 * time.Millisecond
	return cfg
}

// replicaURLs starts n real HTTP replicas on 127.0.0.1 that answer at once; the gateways of
// a test share them.
func replicaURLs(t *testing.T, n int) []string {
	t.Helper()
	urls := make([]string, n)
	for i := range urls {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"ok":true}`)
		}))
		t.Cleanup(srv.Close)
		urls[i] = srv.URL
	}
	return urls
}

// affGateway is one gateway's fleet parts and its pool "fast" over the shared replicas.
type affGateway struct {
	*gateway
	aff  *Affinity
	pool *upstream.Pool
}

// joinWithPool starts a gateway whose pool runs policyName (an lmetric variant as
// "lmetric-sticky") over urls, with affinity when cfg has it on.
func joinWithPool(t *testing.T, cfg Config, id, policyName string, urls []string) *affGateway {
	t.Helper()
	cfg.GatewayID = id
	f, err := New(cfg, 50, Options{Logger: slog.New(slog.DiscardHandler), Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	pc := upstream.DefaultPoolConfig()
	pc.Name = "fast"
	pc.HealthCheck.Interval = 0
	pc.ScrapeInterval = 0
	for i, u := range urls {
		pc.Replicas = append(pc.Replicas, upstream.ReplicaConfig{URL: u, ID: fmt.Sprintf("r%d", i)})
	}
	pc.Policy.Name = policyName
	if policyName == "lmetric-sticky" {
		lm := policy.SectionOf[policy.LMetricConfig](pc.Policy, "lmetric")
		pc.Policy.Name, lm.Variant = "lmetric", policy.LMetricSticky
		require.NoError(t, pc.Policy.SetSection("lmetric", lm))
	}
	opts := upstream.Options{Logger: slog.New(slog.DiscardHandler)}
	if f.Affinity != nil {
		opts.Picks, opts.Remote = f.Affinity, f.Affinity
	}
	pool, err := upstream.New(pc, opts)
	require.NoError(t, err)
	if f.Affinity != nil {
		require.NoError(t, f.Affinity.Attach(pool))
	}
	g := &affGateway{gateway: &gateway{conn: f.Conn, slots: f.Slots, cache: f.Cache}, aff: f.Affinity, pool: pool}
	ctx, cancel := context.WithCancel(context.Background())
	g.cancel = cancel
	g.wg.Go(func() { f.Run(ctx) })
	t.Cleanup(g.stop)
	return g
}

// send routes one request of conversation conv, turn turn, and returns the replica and the
// open response (in flight until closed).
func (g *affGateway) send(t *testing.T, conv, turn int) (string, *upstream.Response) {
	t.Helper()
	// Each conversation has its own opening (several full 128-character blocks) and grows a
	// turn at a time, as chat prompts do.
	prompt := strings.Repeat(fmt.Sprintf("system prompt of conversation %03d. ", conv), 12)
	for i := range turn + 1 {
		prompt += fmt.Sprintf("\nuser: question %d\nassistant: answer %d", i, i)
	}
	resp, err := g.pool.Do(context.Background(), &upstream.ForwardRequest{
		Method: http.MethodPost, Path: "/v1/chat/completions", Body: []byte(`{}`),
		Routing: policy.Request{Prompt: prompt, InputTokens: len(prompt) / 4, Session: fmt.Sprintf("conv-%d", conv)},
	})
	require.NoError(t, err)
	return resp.ReplicaID, resp
}

func (g *affGateway) route(t *testing.T, conv, turn int) string {
	t.Helper()
	id, resp := g.send(t, conv, turn)
	require.NoError(t, resp.Body.Close())
	return id
}

func (g *affGateway) applied() float64 {
	return value(g.conn.m.affPicksReceived.WithLabelValues("applied"))
}

func (g *affGateway) remote(id string) int {
	for _, r := range g.pool.Replicas() {
		if r.ID == id {
			return r.RemoteInFlight
		}
	}
	return -1
}

func waitSubscribed(t *testing.T, gws ...*affGateway) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, g := range gws {
			if !g.aff.subscribed.Load() {
				return false
			}
		}
		return true
	}, 3*time.Second, 5*time.Millisecond)
}

// routeConversations opens 8 conversations on a, then sends their second turns to b in the
// reverse order (so b's own tie-breaking would not repeat a's choices), waiting for b to
// have heard of a's picks when wait is set. It returns how many second turns reached the
// replica of their first.
func routeConversations(t *testing.T, a, b *affGateway, wait bool) int {
	t.Helper()
	const convs = 8
	first := make([]string, convs)
	before := b.applied()
	for c := range convs {
		first[c] = a.route(t, c, 0)
	}
	if wait {
		require.Eventually(t, func() bool { return b.applied() >= before+convs }, 3*time.Second, 5*time.Millisecond)
	}
	same := 0
	for c := convs - 1; c >= 0; c-- {
		if b.route(t, c, 1) == first[c] {
			same++
		}
	}
	return same
}

// A conversation whose first turn went through gateway A has its second turn, sent to
// gateway B, routed to the same replica: prefix-cache through the shared prefix index,
// lmetric-sticky through the shared session binding. Without affinity B decides alone and
// most second turns land elsewhere.
func TestAffinityConversationKeepsItsReplicaAcrossGateways(t *testing.T) {
	r := redistest.Start(t)
	urls := replicaURLs(t, 4)
	for _, pol := range []string{"prefix-cache", "lmetric-sticky", "weighted"} {
		t.Run(pol, func(t *testing.T) {
			cfg := testAffinityConfig(r.URL())
			cfg.KeyPrefix = "aff-" + pol
			a := joinWithPool(t, cfg, "a", pol, urls)
			b := joinWithPool(t, cfg, "b", pol, urls)
			waitSubscribed(t, a, b)
			require.Equal(t, 8, routeConversations(t, a, b, true))
			require.Zero(t, value(b.conn.m.affPicksDropped.WithLabelValues("queue_full")))
			require.Positive(t, value(a.conn.m.affIgnored.WithLabelValues("own")), "a hears its own picks and skips them")
		})
	}
	t.Run("control: affinity off", func(t *testing.T) {
		cfg := testAffinityConfig(r.URL())
		cfg.KeyPrefix = "aff-off"
		cfg.Affinity.Enabled = false
		a := joinWithPool(t, cfg, "a", "prefix-cache", urls)
		b := joinWithPool(t, cfg, "b", "prefix-cache", urls)
		require.Less(t, routeConversations(t, a, b, false), 8, "without sharing B cannot know where A sent them")
	})
}

// Each gateway's requests in flight are part of the others' candidates' load, and stop
// counting within load_expiry when that gateway stops publishing.
func TestRemoteInFlightIsSharedAndExpires(t *testing.T) {
	r := redistest.Start(t)
	cfg := testAffinityConfig(r.URL())
	urls := replicaURLs(t, 2)
	a := joinWithPool(t, cfg, "a", "least-request", urls)
	b := joinWithPool(t, cfg, "b", "least-request", urls)
	waitSubscribed(t, a, b)

	id, resp := a.send(t, 0, 0)
	require.Eventually(t, func() bool { return b.remote(id) == 1 }, 2*time.Second, 5*time.Millisecond)
	require.Zero(t, a.remote(id), "a gateway never counts its own requests twice")
	other := map[string]string{"r0": "r1", "r1": "r0"}[id]
	for range 3 {
		require.Equal(t, other, b.route(t, 1, 0), "b avoids the replica busy on a")
	}
	require.NoError(t, resp.Body.Close())
	require.Eventually(t, func() bool { return b.remote(id) == 0 }, 2*time.Second, 5*time.Millisecond)

	// a holds a request and goes silent (its fleet stops; the pool and the request remain).
	id, resp = a.send(t, 2, 0)
	defer resp.Body.Close()
	require.Eventually(t, func() bool { return b.remote(id) == 1 }, 2*time.Second, 5*time.Millisecond)
	a.stop()
	stopped := time.Now()
	require.Eventually(t, func() bool { return b.remote(id) == 0 }, 3*time.Second, 5*time.Millisecond)
	gone := time.Since(stopped)
	t.Logf("a's load expired %s after it stopped publishing (expiry %s)", gone, cfg.Affinity.LoadExpiry)
	require.Less(t, gone, cfg.Affinity.LoadExpiry+5*cfg.Affinity.LoadInterval+cfg.CommandTimeout)
}

// Redis dies mid-run: no request fails or waits, the other gateway's load stops counting at
// once, picks are dropped and counted; when Redis is back both subscribe again and a
// conversation opened on one gateway is followed on the other again.
func TestAffinitySurvivesARedisOutage(t *testing.T) {
	r := redistest.Start(t)
	cfg := testAffinityConfig(r.URL())
	urls := replicaURLs(t, 4)
	a := joinWithPool(t, cfg, "a", "lmetric-sticky", urls)
	b := joinWithPool(t, cfg, "b", "lmetric-sticky", urls)
	waitSubscribed(t, a, b)
	id, resp := a.send(t, 0, 0)
	require.Eventually(t, func() bool { return b.remote(id) == 1 }, 2*time.Second, 5*time.Millisecond)

	r.Stop()
	stopped := time.Now()
	require.Eventually(t, func() bool { return b.remote(id) == 0 && !b.conn.Up() && !a.conn.Up() }, 2*time.Second, 5*time.Millisecond)
	t.Logf("local state after %s", time.Since(stopped))
	require.Less(t, time.Since(stopped), time.Second, "fall back within 1 s")
	require.Eventually(t, func() bool { return !a.aff.subscribed.Load() && !b.aff.subscribed.Load() }, 2*time.Second, 5*time.Millisecond)

	start := time.Now()
	for c := 10; c < 14; c++ {
		a.route(t, c, 0) // routed on local state; the picks are dropped
	}
	require.Less(t, time.Since(start), time.Second, "no request waits on a dead Redis")
	require.GreaterOrEqual(t, value(a.conn.m.affPicksDropped.WithLabelValues("redis_down")), 4.0, "a knows Redis is down: the picks never queue")

	r.Start()
	waitSubscribed(t, a, b)
	t.Logf("subscribed again %s after Redis was stopped", time.Since(stopped))
	require.Eventually(t, func() bool { return b.remote(id) == 1 }, 2*time.Second, 5*time.Millisecond, "a's load counts again")
	require.NoError(t, resp.Body.Close())
	require.Equal(t, 8, routeConversations(t, a, b, true), "affinity is back")
}

// A message from another fleet's version, or garbage, is counted and ignored.
func TestAffinityIgnoresMalformedMessages(t *testing.T) {
	r := redistest.Start(t)
	cfg := testAffinityConfig(r.URL())
	a := joinWithPool(t, cfg, "a", "prefix-cache", replicaURLs(t, 1))
	waitSubscribed(t, a)
	ch := a.conn.key("affinity", "fast")
	for _, junk := range []string{"", "x", "\x01\x01\x05gw", "\x09\x01\x01g"} {
		_, err := r.Command("PUBLISH", ch, junk)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		return value(a.conn.m.affIgnored.WithLabelValues("malformed")) == 4
	}, 2*time.Second, 5*time.Millisecond)
	require.Zero(t, a.applied())
}

// value reads a counter or gauge.
func value(c prometheus.Metric) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return m.Gauge.GetValue()
}
