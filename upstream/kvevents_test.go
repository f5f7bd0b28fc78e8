package upstream

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/triage-gw/triage/sim"
	"github.com/triage-gw/triage/upstream/kvevents"
	"github.com/triage-gw/triage/upstream/policy"
)

// eventSim is a simulated replica publishing KV events.
type eventSim struct {
	srv *sim.Server
	url string
}

func newEventSim(t *testing.T, name string) eventSim {
	t.Helper()
	c := sim.FastPreset()
	c.Name, c.Model = name, "m"
	c.TTFTBase, c.PrefillPerToken, c.DecodePerToken, c.Jitter = 0, 0, 0, 0
	c.BlockChars, c.KVCacheBlocks = 16, 256
	c.KVEventsEndpoint = "tcp://127.0.0.1:0"
	s, err := sim.New(c, sim.Options{})
	require.NoError(t, err)
	hs := httptest.NewServer(s)
	t.Cleanup(func() { hs.Close(); s.Close() })
	return eventSim{srv: s, url: hs.URL}
}

// warm sends prompt straight to the replica, behind the gateway's back: its
// cache then holds the prompt, which only its events can tell the gateway.
func (e eventSim) warm(t *testing.T, prompt string) {
	t.Helper()
	resp, err := http.Post(e.url+"/v1/completions", "application/json",
		strings.NewReader(`{"model":"m","prompt":"`+prompt+`","max_tokens":1}`))
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
}

// kvSeries reads one replica's kv-events series.
func kvSeries(t *testing.T, f *poolFixture, name, replica string) float64 {
	t.Helper()
	var v float64
	for _, m := range matchingSeries(t, f.reg, "triage_upstream_kv_events_"+name, map[string]string{"replica": replica}) {
		v += m.GetCounter().GetValue() + m.GetGauge().GetValue()
	}
	return v
}

// waitKV polls the pool's metrics until cond holds: the subscribers run
// inside the pool and offer no other notification.
func waitKV(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

// Two simulated replicas publish KV events behind a prefix-cache pool:
// requests sharing a prefix go to the replica whose engine holds it, though
// the gateway never sent it there; when that replica's cache is cleared
// and the other one holds the prefix, routing follows the events, not the
// gateway's memory of where it sent the prompt.
func TestPrefixCacheRoutesOnSimulatedKVEvents(t *testing.T) {
	a, b := newEventSim(t, "a"), newEventSim(t, "b")
	cfg := testConfig(a.url, b.url)
	cfg.Policy.Name = "prefix-cache"
	cfg.Replicas[0].KVEvents = &kvevents.Config{Endpoint: a.srv.KVEventsEndpoint(), Topic: sim.KVEventsTopic}
	cfg.Replicas[1].KVEvents = &kvevents.Config{Endpoint: b.srv.KVEventsEndpoint(), Topic: sim.KVEventsTopic}
	cfg.KVEvents.TokenizeTimeout = Duration(5 * time.Second) // -race on 2 cores
	f := newFixture(t, cfg, nil, nil)
	ctx := runPool(t, f)

	// A PUB drops what it sends before it has seen a subscription: publish
	// AllBlocksCleared (harmless on empty caches) until both get through.
	waitKV(t, "both event streams", func() bool {
		a.srv.ClearCache()
		b.srv.ClearCache()
		return kvSeries(t, f, "batches_total", "r0") > 0 && kvSeries(t, f, "batches_total", "r1") > 0
	})

	prompt := strings.Repeat("You are a careful assistant. ", 12) // 348 bytes: 21 blocks of 16
	var predicted int
	ask := func() string {
		t.Helper()
		resp, err := f.pool.Do(ctx, &ForwardRequest{Method: "POST", Path: "/v1/completions",
			Body:    []byte(`{"model":"m","prompt":"` + prompt + `","max_tokens":1}`),
			Routing: policy.Request{Prompt: prompt, InputTokens: len(prompt) / 4}})
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		require.NoError(t, resp.Body.Close())
		require.True(t, resp.Predicted)
		predicted = resp.PredictedCachedTokens
		return resp.ReplicaID
	}

	b.warm(t, prompt)
	waitKV(t, "b's blocks", func() bool { return kvSeries(t, f, "index_blocks", "r1") == 21 })
	for range 4 {
		require.Equal(t, "r1", ask(), "b's engine holds the prompt")
		// The simulator's token is 4 bytes, its block 16 bytes (4 tokens):
		// the prompt's 21 full blocks are all held.
		require.Equal(t, 4, f.pool.kv.subs["r1"].BlockSize())
		require.Equal(t, 21*4, predicted, "the prediction is the held blocks' tokens")
	}

	b.srv.ClearCache()
	a.warm(t, prompt)
	waitKV(t, "the clear and a's blocks", func() bool {
		return kvSeries(t, f, "index_blocks", "r1") == 0 && kvSeries(t, f, "index_blocks", "r0") == 21
	})
	for range 4 {
		require.Equal(t, "r0", ask(), "the gateway sent the prompt to b, but a holds it now")
		require.Equal(t, 21*4, predicted)
	}
	require.Zero(t, kvSeries(t, f, "fallbacks_total", "r0"))
	require.Equal(t, float64(1), sumSeries(t, f, "triage_upstream_tokenize_total", map[string]string{"result": "ok"}))
	require.Equal(t, float64(7), sumSeries(t, f, "triage_upstream_tokenize_total", map[string]string{"result": "cached"}),
		"the same prompt is tokenized once")
}

// A replica with kv_events but no endpoint is asked where its engine
// publishes (GET /kv_event_sources, answered here in vLLM 0.32's shape with
// the simulator's port behind "*"), with the replica's headers, and its
// events are followed from there.
func TestKVEventsEndpointDiscovered(t *testing.T) {
	sv := newEventSim(t, "a")
	_, port, err := net.SplitHostPort(strings.TrimPrefix(sv.srv.KVEventsEndpoint(), "tcp://"))
	require.NoError(t, err)
	simURL, err := url.Parse(sv.url)
	require.NoError(t, err)
	asked := make(chan string, 16)
	front := replicaServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/kv_event_sources" {
			httputil.NewSingleHostReverseProxy(simURL).ServeHTTP(w, r)
			return
		}
		asked <- r.Header.Get("Authorization")
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"0":{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:`+port+
			`","replay_endpoint":null,"buffer_steps":10000,"hwm":100000,"max_queue_size":100000,"topic":"`+sim.KVEventsTopic+`"}}`)
	})
	cfg := testConfig(front.URL)
	cfg.Policy.Name = "prefix-cache"
	cfg.Replicas[0].Headers = map[string]string{"Authorization": "Bearer k"}
	cfg.Replicas[0].KVEvents = &kvevents.Config{}
	f := newFixture(t, cfg, nil, nil)
	runPool(t, f)

	require.Equal(t, "Bearer k", <-asked)
	waitKV(t, "the discovered stream", func() bool {
		sv.srv.ClearCache()
		return kvSeries(t, f, "batches_total", "r0") > 0
	})
	prompt := strings.Repeat("You are a careful assistant. ", 12)
	sv.warm(t, prompt)
	waitKV(t, "the blocks", func() bool { return kvSeries(t, f, "index_blocks", "r0") == 21 })
}

// The simulator answers GET /kv_event_sources as vLLM 0.32 does, so a pool of
// simulated replicas with kv_events: {} finds their streams with no endpoint
// configured; one publishing nothing answers {}.
func TestSimulatorServesKVEventSources(t *testing.T) {
	sv := newEventSim(t, "a")
	resp, err := http.Get(sv.url + kvevents.SourcesPath)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	got, err := kvevents.ParseSources(body, "127.0.0.1")
	require.NoError(t, err, string(body))
	require.Equal(t, sv.srv.KVEventsEndpoint(), got.Endpoint)
	require.Equal(t, sim.KVEventsTopic, got.Topic)

	cfg := testConfig(sv.url)
	cfg.Policy.Name = "prefix-cache"
	cfg.Replicas[0].KVEvents = &kvevents.Config{}
	f := newFixture(t, cfg, nil, nil)
	runPool(t, f)
	waitKV(t, "the discovered stream", func() bool {
		sv.srv.ClearCache()
		return kvSeries(t, f, "batches_total", "r0") > 0
	})

	c := sim.FastPreset()
	c.Name, c.Model = "quiet", "m"
	quiet, err := sim.New(c, sim.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { quiet.Close() })
	rec := httptest.NewRecorder()
	quiet.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, kvevents.SourcesPath, nil))
	require.Equal(t, http.StatusOK, rec.Code)
	_, err = kvevents.ParseSources(rec.Body.Bytes(), "127.0.0.1")
	require.ErrorIs(t, err, kvevents.ErrNoSources)
}

// An engine that does not serve /kv_event_sources leaves the replica on the
// guess, and the pool keeps serving.
func TestKVEventsDiscoveryNotServed(t *testing.T) {
	var logs syncBuffer
	var asked atomic.Int32
	srv := replicaServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/kv_event_sources" {
			asked.Add(1)
		}
		http.NotFound(w, r)
	})
	cfg := testConfig(srv.URL)
	cfg.Replicas[0].KVEvents = &kvevents.Config{}
	p, err := New(cfg, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil)), Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	_, err = p.kvEventSources(p.replicas[0])(context.Background())
	require.ErrorContains(t, err, "GET /kv_event_sources: 404: the engine does not say where it publishes")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	waitKV(t, "three more tries", func() bool { return asked.Load() >= 4 }) // 0.1 s, 0.2 s, 0.4 s apart
	cancel()
	require.NoError(t, <-done)
	require.Equal(t, 1, strings.Count(logs.String(), "kv events endpoint not discovered"), "logged once while the error stays the same")
}

func sumSeries(t *testing.T, f *poolFixture, name string, want map[string]string) float64 {
	t.Helper()
	var v float64
	for _, m := range matchingSeries(t, f.reg, name, want) {
		v += m.GetCounter().GetValue()
	}
	return v
}

// Without live events (the publisher is not there) the pool routes as
// before, by the policy's guess, and says so.
func TestKVEventsDownFallsBackToTheGuess(t *testing.T) {
	a, b := newEventSim(t, "a"), newEventSim(t, "b")
	cfg := testConfig(a.url, b.url)
	cfg.Policy.Name = "prefix-cache"
	cfg.Replicas[0].KVEvents = &kvevents.Config{Endpoint: "tcp://127.0.0.1:1", Topic: sim.KVEventsTopic}
	f := newFixture(t, cfg, nil, nil)
	prompt := strings.Repeat("x", 200)
	ctx := context.Background()
	var got []string
	predicted := true
	for range 3 {
		resp, err := f.pool.Do(ctx, &ForwardRequest{Method: "POST", Path: "/v1/completions",
			Body:    []byte(`{"model":"m","prompt":"` + prompt + `","max_tokens":1}`),
			Routing: policy.Request{Prompt: prompt, InputTokens: 50}})
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		require.NoError(t, resp.Body.Close())
		got = append(got, resp.ReplicaID)
		predicted = resp.Predicted
	}
	require.Equal(t, got[0], got[1], "the guess keeps the prefix where it went")
	require.False(t, predicted, "no live events: no prediction")
	require.Equal(t, got[0], got[2])
	require.Equal(t, float64(3), kvSeries(t, f, "fallbacks_total", "r0"))
}

// A burst of one new prefix stays on the replica picked first: its blocks
// count as held there for pending_ttl, before the engine's BlockStored
// (sent only once the prefill ends) confirms them.
func TestKVEventsPendingKeepsABurstTogether(t *testing.T) {
	slow := func(name string) eventSim {
		c := sim.FastPreset()
		c.Name, c.Model = name, "m"
		c.TTFTBase, c.PrefillPerToken, c.DecodePerToken, c.Jitter = 300*time.Millisecond, 0, 0, 0
		c.BlockChars, c.KVCacheBlocks = 16, 256
		c.KVEventsEndpoint = "tcp://127.0.0.1:0"
		s, err := sim.New(c, sim.Options{})
		require.NoError(t, err)
		hs := httptest.NewServer(s)
		t.Cleanup(func() { hs.Close(); s.Close() })
		return eventSim{srv: s, url: hs.URL}
	}
	a, b := slow("a"), slow("b")
	cfg := testConfig(a.url, b.url)
	cfg.Policy.Name = "prefix-cache"
	cfg.KVEvents.BlockSize = 4
	cfg.KVEvents.TokenizeTimeout = Duration(5 * time.Second)
	cfg.Replicas[0].KVEvents = &kvevents.Config{Endpoint: a.srv.KVEventsEndpoint(), Topic: sim.KVEventsTopic}
	cfg.Replicas[1].KVEvents = &kvevents.Config{Endpoint: b.srv.KVEventsEndpoint(), Topic: sim.KVEventsTopic}
	f := newFixture(t, cfg, nil, nil)
	ctx := runPool(t, f)
	waitKV(t, "both event streams", func() bool {
		a.srv.ClearCache()
		b.srv.ClearCache()
		return kvSeries(t, f, "batches_total", "r0") > 0 && kvSeries(t, f, "batches_total", "r1") > 0
	})

	prompt := strings.Repeat("A brand new shared prefix. ", 12) // 324 bytes: 81 tokens, 20 full blocks of 4
	type answer struct {
		replica            string
		predicted, pending int
	}
	answers := make(chan answer, 3)
	for i := range 3 {
		go func() {
			resp, err := f.pool.Do(ctx, &ForwardRequest{Method: "POST", Path: "/v1/completions",
				Body:    []byte(`{"model":"m","prompt":"` + prompt + `","max_tokens":1}`),
				Routing: policy.Request{Prompt: prompt, InputTokens: len(prompt) / 4}})
			if err != nil {
				answers <- answer{replica: err.Error()}
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if !resp.Predicted {
				answers <- answer{replica: "no prediction"}
				return
			}
			answers <- answer{resp.ReplicaID, resp.PredictedCachedTokens, resp.PendingCachedTokens}
		}()
		// The next request starts once this one is prefilling on its replica: the pool counts
		// it in flight a moment before it records the pick's pending blocks, but it sends the
		// request only after, so a request the simulator has is one whose pick is recorded.
		waitKV(t, "the request in flight", func() bool {
			sa, sb := a.srv.Stats(), b.srv.Stats()
			return sa.Running+sa.Waiting+sb.Running+sb.Waiting == i+1
		})
	}
	got := []answer{<-answers, <-answers, <-answers}
	first := got[0].replica
	// The first pick found nothing held and nothing pending; the engine had
	// stored nothing before the other two either (its prefill takes 300ms):
	// what drew them to the same replica was the first pick's pending
	// blocks, and their prediction says so. The answers' order is the
	// scheduler's, so they are compared as a set.
	require.ElementsMatch(t, []answer{{first, 0, 0}, {first, 0, 20 * 4}, {first, 0, 20 * 4}}, got, "answers: %+v", got)
}

// BenchmarkTokenize measures what routing on KV events adds to a request
// before the pick: one POST /tokenize to a replica over loopback, its JSON
// answer decoded, and the block keys computed, for a chat prompt of the
// given size, uncached. Against the simulator this is the gateway's share;
// a real engine adds its tokenizer and chat template on top.
func BenchmarkTokenize(b *testing.B) {
	for _, size := range []int{1 << 10, 16 << 10} {
		b.Run(strconv.Itoa(size)+"B", func(b *testing.B) {
			c := sim.FastPreset()
			c.Model = "m"
			s, err := sim.New(c, sim.Options{})
			require.NoError(b, err)
			hs := httptest.NewServer(s)
			b.Cleanup(hs.Close)
			cfg := testConfig(hs.URL)
			cfg.Replicas[0].KVEvents = &kvevents.Config{Endpoint: "tcp://127.0.0.1:1"}
			cfg.KVEvents.TokenizeCacheTokens = 0
			cfg.KVEvents.TokenizeTimeout = Duration(10 * time.Second) // the cost, not the bound
			p, err := New(cfg, Options{})
			require.NoError(b, err)
			text := strings.Repeat("x", size)
			fr := &ForwardRequest{Path: "/v1/chat/completions",
				Body: []byte(`{"model":"m","messages":[{"role":"user","content":"` + text + `"}]}`)}
			ctx := context.Background()
			b.ResetTimer()
			for b.Loop() {
				tokens, _, res := p.tokenize(ctx, fr, p.replicas[0])
				if res != tokenizeOK {
					b.Fatal(res)
				}
				_ = kvevents.AppendKeys(nil, tokens, 16, 0)
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "us/request")
		})
	}
}

func TestKVEventsConfigErrorsNameTheField(t *testing.T) {
	cfg := testConfig("http://127.0.0.1:1", "http://127.0.0.1:2")
	cfg.Replicas[0].KVEvents = &kvevents.Config{Endpoint: "tcp://*:5557"}
	cfg.Replicas[1].KVEvents = &kvevents.Config{Endpoint: "10.0.0.7:5557", Mode: "sub"}
	cfg.KVEvents.TokenizeTimeout = 0
	cfg.KVEvents.Limits.MaxBlocks = -1
	err := cfg.Validate()
	require.Error(t, err)
	for _, want := range []string{
		"pool.replicas[0].kv_events.endpoint: \"tcp://*:5557\": host * means every interface",
		"pool.replicas[1].kv_events.mode: must be \"connect\" or \"bind\"",
		"pool.replicas[1].kv_events.endpoint: \"10.0.0.7:5557\": only tcp://host:port",
		"pool.kv_events.tokenize_timeout: must be > 0",
		"pool.kv_events.limits.max_blocks: must be in [1, 67108864], got -1",
	} {
		require.ErrorContains(t, err, want)
	}
}

func TestTokenizeBody(t *testing.T) {
	for _, tc := range []struct {
		name, path, body string
		want             map[string]string // field → raw JSON; nil: not tokenizable
	}{
		{"chat", "/v1/chat/completions",
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function"}],"temperature":0.2,"stream":true}`,
			map[string]string{"model": `"m"`, "messages": `[{"role":"user","content":"hi"}]`, "tools": `[{"type":"function"}]`, "add_generation_prompt": "true"}},
		{"chat continuing the last message", "/v1/chat/completions",
			`{"messages":[{"role":"assistant","content":"Once"}],"add_generation_prompt":false,"continue_final_message":true}`,
			map[string]string{"model": "null", "messages": `[{"role":"assistant","content":"Once"}]`, "add_generation_prompt": "false", "continue_final_message": "true"}},
		{"completion", "/v1/completions", `{"model":"m","prompt":"abc","max_tokens":3}`,
			map[string]string{"model": `"m"`, "prompt": `"abc"`}},
		{"token-array prompt", "/v1/completions", `{"model":"m","prompt":[1,2,3]}`, nil},
		{"no messages", "/v1/chat/completions", `{"model":"m"}`, nil},
		{"not JSON", "/v1/chat/completions", `{`, nil},
		{"other path", "/v1/embeddings", `{"input":"x"}`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := tokenizeBody(tc.path, []byte(tc.body))
			if tc.want == nil {
				require.False(t, ok)
				return
			}
			require.True(t, ok)
			raw := map[string]string{}
			for k, v := range got {
				raw[k] = string(v)
			}
			if got["model"] == nil {
				raw["model"] = "null"
			}
			require.Equal(t, tc.want, raw)
		})
	}
}

func TestTokenCacheBoundedInTokens(t *testing.T) {
	c := newTokenCache(100)
	c.put(1, make([]uint32, 25))
	c.put(2, make([]uint32, 20))
	_, ok := c.get(1) // 1 is now more recent than 2
	require.True(t, ok)
	c.put(3, make([]uint32, 25))
	c.put(4, make([]uint32, 25))
	c.put(5, make([]uint32, 25)) // 120 tokens: 2, the least recent, goes
	_, ok = c.get(2)
	require.False(t, ok)
	for _, k := range []uint64{1, 3, 4, 5} {
		_, ok := c.get(k)
		require.True(t, ok, "key %d", k)
	}
	c.put(6, make([]uint32, 26)) // over a quarter of the cache: not kept
	_, ok = c.get(6)
	require.False(t, ok)
	require.Equal(t, 100, c.size)
}

// runPool runs f's pool (its subscribers, scrapes and checks) until the test ends, and returns
// the context it runs under, for the test's own requests.
func runPool(t *testing.T, f *poolFixture) context.Context {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.pool.Run(ctx) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })
	return ctx
}
