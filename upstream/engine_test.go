package upstream

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/sim"
	"github.com/triage-gw/triage/upstream/kvevents"
	"github.com/triage-gw/triage/upstream/policy"
)

// engineFixtures are the /metrics texts of upstream/testdata/metrics: vLLM's
// captured from the engine, the others constructed from each engine's source
// (each file's header says which commit and files).
var engineFixtures = map[string]string{
	EngineVLLM:     "testdata/metrics/vllm-0.32.0.txt",
	EngineSGLang:   "testdata/metrics/sglang-44cedc2b.txt",
	EngineLlamaCpp: "testdata/metrics/llamacpp-server.txt",
	EngineTGI:      "testdata/metrics/tgi-3.3.7.txt",
}

func readFixture(t *testing.T, engine string) string {
	t.Helper()
	b, err := os.ReadFile(engineFixtures[engine])
	require.NoError(t, err)
	return string(b)
}

// Each engine's /metrics is read with its own names, whether the engine is
// set or detected: the load gauges, KV usage where the engine has one (and
// unknown where it has none), the token counters, the latency histograms
// and the block size.
func TestEngineProfilesReadTheirFixtures(t *testing.T) {
	for _, tc := range []struct {
		engine             string
		waiting, running   int
		kv                 float64
		kvOK               bool
		prompt, generation cumulative
		ttft, tpot         cumulative
		blockSize          int
	}{
		{
			engine: EngineVLLM, waiting: 1, running: 2, kv: 0.23483365949119372, kvOK: true,
			prompt: cumulative{sum: 6031, ok: true}, generation: cumulative{sum: 5876, ok: true},
			ttft:      cumulative{sum: 9.923463344573975, count: 5, ok: true},
			tpot:      cumulative{sum: 16.913227905000895, count: 5871, ok: true},
			blockSize: 32,
		},
		{
			engine: EngineSGLang, waiting: 3, running: 2, kv: 0.41, kvOK: true,
			prompt: cumulative{sum: 120455, ok: true}, generation: cumulative{sum: 30117, ok: true},
			ttft:      cumulative{sum: 18.6, count: 120, ok: true},
			tpot:      cumulative{sum: 449.955, count: 29997, ok: true},
			blockSize: 16,
		},
		{
			// No KV gauge in current releases, no TTFT histogram; the time
			// per output token from the seconds and tokens counters.
			engine: EngineLlamaCpp, waiting: 2, running: 4,
			prompt: cumulative{sum: 18342, ok: true}, generation: cumulative{sum: 6400, ok: true},
			tpot: cumulative{sum: 160, count: 6400, ok: true},
		},
		{
			// No KV gauge, no TTFT; tokens from per-request histograms' sums.
			engine: EngineTGI, waiting: 7, running: 5,
			prompt: cumulative{sum: 151338, ok: true}, generation: cumulative{sum: 41200, ok: true},
			tpot: cumulative{sum: 4.4, count: 200, ok: true},
		},
	} {
		for _, setting := range []string{tc.engine, EngineAuto, ""} {
			t.Run(tc.engine+"/"+setting, func(t *testing.T) {
				l, err := parseMetrics(strings.NewReader(readFixture(t, tc.engine)), setting)
				require.NoError(t, err)
				require.Equal(t, tc.engine, l.engine)
				require.Equal(t, tc.waiting, l.waiting, "waiting")
				require.Equal(t, tc.running, l.running, "running")
				require.Equal(t, tc.kvOK, l.kvOK, "KV usage known")
				require.InDelta(t, tc.kv, l.kv, 1e-12)
				require.Equal(t, tc.prompt, l.promptTokens, "prompt tokens")
				require.Equal(t, tc.generation, l.generationTokens, "generation tokens")
				require.Equal(t, tc.ttft, l.ttftHist, "time to first token")
				require.Equal(t, tc.tpot, l.tpotHist, "time per output token")
				require.Equal(t, tc.blockSize, l.blockSize, "block size")
			})
		}
	}
}

// A replica set to one engine that serves another's /metrics fails its
// scrape, naming the gauges it looked for; auto refuses a body that holds
// two engines' gauges rather than guess.
func TestEngineMismatchAndAmbiguity(t *testing.T) {
	_, err := parseMetrics(strings.NewReader(readFixture(t, EngineSGLang)), EngineVLLM)
	require.ErrorContains(t, err, "none of vllm:num_requests_waiting, vllm:num_requests_running, vllm:kv_cache_usage_perc")
	_, err = parseMetrics(strings.NewReader(readFixture(t, EngineVLLM)), EngineTGI)
	require.ErrorContains(t, err, "none of tgi_queue_size, tgi_batch_current_size (engine tgi)")

	both := readFixture(t, EngineLlamaCpp) + readFixture(t, EngineTGI)
	_, err = parseMetrics(strings.NewReader(both), EngineAuto)
	require.ErrorContains(t, err, "load gauges of several engines (llamacpp, tgi); set engine on the replica")
	l, err := parseMetrics(strings.NewReader(both), EngineTGI)
	require.NoError(t, err, "a set engine reads its own names and ignores the rest")
	require.Equal(t, 7, l.waiting)

	// Older llama.cpp releases still exported the KV ratio.
	l, err = parseMetrics(strings.NewReader("llamacpp:requests_processing 1\nllamacpp:kv_cache_usage_ratio 0.5\n"), "")
	require.NoError(t, err)
	require.Equal(t, EngineLlamaCpp, l.engine)
	require.True(t, l.kvOK)
	require.InDelta(t, 0.5, l.kv, 1e-12)
}

// An engine without a KV gauge reaches the policies as unknown: KVUnknown
// set, no KV series on /metrics, least-kv-cache falls back to least-request
// instead of taking the 0 for an empty cache. The admin status names the
// engine the scrape was read as.
func TestEngineWithoutKVUsageIsUnknownToPolicies(t *testing.T) {
	llama := replicaServer(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(readFixture(t, EngineLlamaCpp)))
	})
	vllm := replicaServer(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(readFixture(t, EngineVLLM)))
	})
	cfg := testConfig(llama.URL, vllm.URL)
	cfg.ScrapeInterval = Duration(2 * time.Second)
	cfg.Replicas[0].Engine = EngineLlamaCpp
	f := newFixture(t, cfg, policy.NewLeastKVCache(), nil)
	p := f.pool
	p.scrapeOnce(context.Background())

	st := p.Replicas()
	require.Equal(t, EngineLlamaCpp, st[0].Engine)
	require.False(t, st[0].KVKnown)
	require.Equal(t, 4, st[0].Running)
	require.Equal(t, EngineVLLM, st[1].Engine, "detected")
	require.True(t, st[1].KVKnown)

	kv := func(replica string) int {
		return len(matchingSeries(t, f.reg, "triage_upstream_scraped_kv_cache_usage_ratio", map[string]string{"replica": replica}))
	}
	require.Zero(t, kv("r0"), "no KV series for an engine that exports none")
	require.Equal(t, 1, kv("r1"))

	cands := []policy.Candidate{
		p.replicas[0].candidate(f.clock.now(), p.staleAfter()),
		p.replicas[1].candidate(f.clock.now(), p.staleAfter()),
	}
	require.True(t, cands[0].KVUnknown)
	require.False(t, cands[1].KVUnknown)
	require.True(t, cands[0].Fresh && cands[1].Fresh)
	// r0 reads 0 but is unknown, r1 reads 0.23: least-kv-cache must not
	// take r0 for the emptier; with a signal missing it goes least-request,
	// which picks r1 when r0 has more in flight.
	cands[0].InFlight = 3
	require.Equal(t, 1, policy.NewLeastKVCache().Pick(&policy.Request{}, cands))
}

// The block size the KV-event index keys prompts by comes from the
// engine's vllm:cache_config_info when its events have not said it yet,
// over the configured one, with a warning when they differ.
func TestBlockSizeFromCacheConfigInfo(t *testing.T) {
	srv := replicaServer(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(readFixture(t, EngineVLLM)))
	})
	cfg := testConfig(srv.URL, srv.URL)
	cfg.ScrapeInterval = Duration(2 * time.Second)
	cfg.KVEvents.BlockSize = 16
	cfg.Replicas[0].KVEvents = &kvevents.Config{Endpoint: "tcp://127.0.0.1:1"}
	cfg.Replicas[1].KVEvents = &kvevents.Config{Endpoint: "tcp://127.0.0.1:1"}
	var logs syncBuffer
	p, err := New(cfg, Options{
		Picker:     policy.NewLeastRequest(),
		Logger:     slog.New(slog.NewTextHandler(&logs, nil)),
		Registerer: prometheus.NewRegistry(),
	})
	require.NoError(t, err)
	v := &kvView{kv: p.kv}
	s0 := p.kv.subs["r0"]

	require.Equal(t, 16, v.blockSize("r0", s0), "before any scrape: the configured size")
	p.scrapeOnce(context.Background())
	require.Equal(t, 32, v.blockSize("r0", s0), "the engine's stated size wins")
	require.Contains(t, logs.String(), "replica's engine states another KV block size than kv_events.block_size")
	require.Contains(t, logs.String(), "engine_block_size=32 configured_block_size=16")
	warnings := strings.Count(logs.String(), "another KV block size")
	require.Equal(t, 2, warnings, "one per replica")
	p.scrapeOnce(context.Background())
	require.Equal(t, warnings, strings.Count(logs.String(), "another KV block size"), "logged on change, not every scrape")
}

// syncBuffer is a bytes.Buffer safe for the pool's concurrent scrapes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestEngineConfigErrorsNameTheReplica(t *testing.T) {
	cfg := testConfig("http://127.0.0.1:1", "http://127.0.0.1:2")
	cfg.Engine = "triton"
	cfg.Replicas[1].Engine = "vLLM"
	err := cfg.ValidateAt("pools.fast")
	require.ErrorContains(t, err, `pools.fast.engine: unknown engine "triton" (want auto, vllm, sglang, llamacpp, tgi)`)
	require.ErrorContains(t, err, `pools.fast.replicas[1].engine: replica "r1": unknown engine "vLLM"`)

	cfg.Engine, cfg.Replicas[1].Engine = "", EngineSGLang
	require.NoError(t, cfg.Validate(), "empty means auto")
}

// When a replica's events carry another block size than its /metrics
// states, the events' is used and the mismatch logged once.
func TestBlockSizeEventsAgainstMetrics(t *testing.T) {
	sv := newEventSim(t, "a") // its events carry blocks of 4 tokens (16 bytes, 4 a token)
	simURL, err := url.Parse(sv.url)
	require.NoError(t, err)
	front := replicaServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			_, _ = w.Write([]byte(readFixture(t, EngineVLLM))) // states block_size 32
			return
		}
		httputil.NewSingleHostReverseProxy(simURL).ServeHTTP(w, r)
	})
	cfg := testConfig(front.URL)
	cfg.ScrapeInterval = Duration(time.Hour) // one scrape at Run's start, the rest by hand
	cfg.Replicas[0].KVEvents = &kvevents.Config{Endpoint: sv.srv.KVEventsEndpoint(), Topic: sim.KVEventsTopic}
	var logs syncBuffer
	reg := prometheus.NewRegistry()
	p, err := New(cfg, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil)), Registerer: reg})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })
	f := &poolFixture{pool: p, reg: reg}
	waitKV(t, "the first scrape and the stream", func() bool {
		sv.srv.ClearCache()
		return !p.Replicas()[0].ScrapedAt.IsZero() && kvSeries(t, f, "batches_total", "r0") > 0
	})
	sv.warm(t, strings.Repeat("Blocks of four tokens. ", 8))
	waitKV(t, "the events' block size", func() bool { return p.kv.subs["r0"].BlockSize() > 0 })

	v := &kvView{kv: p.kv}
	require.Equal(t, 4, v.blockSize("r0", p.kv.subs["r0"]), "the events' size over the stated one")
	const msg = "replica's KV events and its /metrics state different block sizes"
	p.scrapeOnce(ctx)
	require.Contains(t, logs.String(), "events_block_size=4 metrics_block_size=32")
	p.scrapeOnce(ctx)
	require.Equal(t, 1, strings.Count(logs.String(), msg), "logged once")
}
