package upstream

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/upstream/policy"
)

// vllmMetrics is shaped like vLLM 0.8's /metrics: colons in names, labels,
// histograms, counters with _created series, and two engines.
const vllmMetrics = `# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 12345.0
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 7.0
vllm:num_requests_running{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 5.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 3.0
vllm:num_requests_waiting{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.25
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 98765.0
# HELP vllm:prompt_tokens_created Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_created gauge
vllm:prompt_tokens_created{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1.7376e+09
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.5",model_name="meta-llama/Llama-3.1-8B-Instruct"} 40.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="meta-llama/Llama-3.1-8B-Instruct"} 42.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 42.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 3.5
`

func TestParseMetrics(t *testing.T) {
	l, err := parseMetrics(strings.NewReader(vllmMetrics), "")
	require.NoError(t, err)
	require.Equal(t, 4, l.waiting, "summed across engines")
	require.Equal(t, 12, l.running)
	require.InDelta(t, 0.375, l.kv, 1e-9, "averaged across engines")
	require.Equal(t, cumulative{sum: 98765, ok: true}, l.promptTokens, "the _created series is not the counter")
	require.False(t, l.generationTokens.ok, "absent")
	require.Equal(t, cumulative{sum: 3.5, count: 42, ok: true}, l.ttftHist)
	require.False(t, l.tpotHist.ok)

	old := "# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc{model_name=\"m\"} 0.9\n" +
		"vllm:num_requests_waiting{model_name=\"m\"} 2\n" // untyped
	l, err = parseMetrics(strings.NewReader(old), "")
	require.NoError(t, err)
	require.InDelta(t, 0.9, l.kv, 1e-9, "falls back to the pre-v1 name")
	require.Equal(t, 2, l.waiting)

	_, err = parseMetrics(strings.NewReader("# TYPE up gauge\nup 1\n"), "")
	require.ErrorContains(t, err, "no load gauges of any known engine")
	_, err = parseMetrics(strings.NewReader("# TYPE up gauge\nup 1\n"), EngineVLLM)
	require.ErrorContains(t, err, "none of vllm:num_requests_waiting")
	_, err = parseMetrics(strings.NewReader("vllm:num_requests_running{ 1\n"), "")
	require.ErrorContains(t, err, "parse /metrics")
}

func TestScrapeOnce(t *testing.T) {
	var fail atomic.Bool
	srv := replicaServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" || fail.Load() {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		io.WriteString(w, vllmMetrics)
	})
	cfg := testConfig(srv.URL, deadURL(t))
	cfg.ScrapeInterval = Duration(2 * time.Second)
	var seen []policy.Candidate
	picker := &stubPicker{pick: func(_ *policy.Request, cands []policy.Candidate) int {
		seen = append(seen[:0], cands...)
		return 0
	}}
	f := newFixture(t, cfg, picker, nil)
	p, ctx := f.pool, context.Background()

	p.scrapeOnce(ctx)
	st := p.Replicas()
	require.True(t, st[0].Fresh)
	require.Equal(t, 4, st[0].Waiting)
	require.Equal(t, 12, st[0].Running)
	require.InDelta(t, 0.375, st[0].KVUtilization, 1e-9)
	require.Equal(t, f.clock.now(), st[0].ScrapedAt)
	require.False(t, st[1].Fresh, "never scraped")

	resp, err := p.Do(ctx, &ForwardRequest{Path: "/metrics"}) // a 200, so not retried on the dead r1
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, policy.Candidate{ID: "r0", Waiting: 4, Running: 12, KVUtilization: 0.375, Fresh: true, Weight: 1}, seen[0])
	require.Equal(t, policy.Candidate{ID: "r1", Weight: 1}, seen[1])

	// Failed scrapes keep the last values; they go stale after three intervals.
	fail.Store(true)
	f.clock.advance(6 * time.Second)
	p.scrapeOnce(ctx)
	require.True(t, p.Replicas()[0].Fresh)
	f.clock.advance(time.Millisecond)
	st = p.Replicas()
	require.False(t, st[0].Fresh)
	require.Equal(t, 4, st[0].Waiting, "stale values are kept as they are")

	fail.Store(false)
	p.scrapeOnce(ctx)
	require.True(t, p.Replicas()[0].Fresh)
}

// TestScrapeMetrics: what the policy sees is on /metrics too. The scraped gauges and their
// age appear with the first successful scrape, failed scrapes are counted and age the kept
// values, and every series carries only the pool and replica labels.
func TestScrapeMetrics(t *testing.T) {
	var fail atomic.Bool
	srv := replicaServer(t, func(w http.ResponseWriter, r *http.Request) {
		if fail.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, vllmMetrics)
	})
	cfg := testConfig(srv.URL, deadURL(t))
	cfg.ScrapeInterval = Duration(2 * time.Second)
	f := newFixture(t, cfg, &stubPicker{}, nil)
	p, ctx := f.pool, context.Background()
	r0 := map[string]string{"pool": "test", "replica": "r0"}
	r1 := map[string]string{"pool": "test", "replica": "r1"}
	gauges := []string{
		"triage_upstream_scraped_waiting_requests", "triage_upstream_scraped_running_requests",
		"triage_upstream_scraped_kv_cache_usage_ratio", "triage_upstream_scrape_age_seconds",
	}
	series := func(name string, want map[string]string) int { return len(matchingSeries(t, f.reg, name, want)) }

	for _, name := range gauges {
		require.Zero(t, series(name, nil), "%s before any scrape", name)
	}
	require.Equal(t, 2, series("triage_upstream_scrape_failures_total", nil), "one counter per replica, at 0")

	p.scrapeOnce(ctx)
	require.Equal(t, 4.0, f.metric(t, "triage_upstream_scraped_waiting_requests", r0))
	require.Equal(t, 12.0, f.metric(t, "triage_upstream_scraped_running_requests", r0))
	require.InDelta(t, 0.375, f.metric(t, "triage_upstream_scraped_kv_cache_usage_ratio", r0), 1e-9)
	require.Equal(t, 1, series("triage_upstream_scrape_age_seconds", r0))
	require.Zero(t, f.metric(t, "triage_upstream_scrape_age_seconds", r0))
	require.Zero(t, f.metric(t, "triage_upstream_scrape_failures_total", r0))
	require.Equal(t, 1.0, f.metric(t, "triage_upstream_scrape_failures_total", r1), "the dead replica")
	for _, name := range gauges {
		require.Zero(t, series(name, r1), "%s of a replica never scraped", name)
	}

	fail.Store(true)
	for range 2 {
		f.clock.advance(2 * time.Second)
		p.scrapeOnce(ctx)
	}
	require.Equal(t, 2.0, f.metric(t, "triage_upstream_scrape_failures_total", r0))
	require.Equal(t, 3.0, f.metric(t, "triage_upstream_scrape_failures_total", r1))
	require.Equal(t, 4.0, f.metric(t, "triage_upstream_scrape_age_seconds", r0), "two failed rounds of 2s")
	require.Equal(t, 12.0, f.metric(t, "triage_upstream_scraped_running_requests", r0), "kept, as the policy keeps them")

	fail.Store(false)
	f.clock.advance(2 * time.Second)
	p.scrapeOnce(ctx)
	require.Zero(t, f.metric(t, "triage_upstream_scrape_age_seconds", r0))
	require.Equal(t, 2.0, f.metric(t, "triage_upstream_scrape_failures_total", r0), "a success does not reset the counter")

	for _, name := range append(gauges, "triage_upstream_scrape_failures_total") {
		for _, m := range matchingSeries(t, f.reg, name, nil) {
			var labels []string
			for _, lp := range m.GetLabel() {
				labels = append(labels, lp.GetName())
			}
			require.Equal(t, []string{"pool", "replica"}, labels, name)
		}
	}
}

// signalBody is a /metrics body with the gauges, the token counters and
// the two latency histograms (TPOT under the name given), split over two
// engines as vLLM's data-parallel replicas export them.
func signalBody(prompt, gen, ttftSum, ttftCount, tpotSum, tpotCount float64, tpotName string) string {
	var b strings.Builder
	b.WriteString("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine=\"0\"} 1\n")
	b.WriteString("# TYPE vllm:prompt_tokens_total counter\n")
	fmt.Fprintf(&b, "vllm:prompt_tokens_total{engine=\"0\"} %g\nvllm:prompt_tokens_total{engine=\"1\"} %g\n", prompt/2, prompt/2)
	fmt.Fprintf(&b, "# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total{engine=\"0\"} %g\n", gen)
	hist := func(name string, sum, count float64) {
		fmt.Fprintf(&b, "# TYPE %s histogram\n", name)
		for e, share := range []float64{0.5, 0.5} { // counts stay whole
			fmt.Fprintf(&b, "%s_bucket{engine=\"%d\",le=\"+Inf\"} %g\n", name, e, count*share)
			fmt.Fprintf(&b, "%s_sum{engine=\"%d\"} %g\n%s_count{engine=\"%d\"} %g\n", name, e, sum*share, name, e, count*share)
		}
	}
	hist("vllm:time_to_first_token_seconds", ttftSum, ttftCount)
	if tpotName != "" {
		hist(tpotName, tpotSum, tpotCount)
	}
	return b.String()
}

func scrapeAt(t *testing.T, at time.Time, body string, prev *replicaLoad) *replicaLoad {
	t.Helper()
	l, err := parseMetrics(strings.NewReader(body), "")
	require.NoError(t, err)
	l.scrapedAt = at
	l.derive(prev)
	return l
}

func TestDeriveRatesAndMeans(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	sec := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

	first := scrapeAt(t, t0, signalBody(1000, 500, 10, 100, 2, 200, "vllm:inter_token_latency_seconds"), nil)
	require.False(t, first.rates, "one scrape gives no rate")
	require.False(t, first.ttft.ok, "nor a mean: the cumulative one could be days old")
	require.False(t, first.tpot.ok)

	// 2 s later: +400 prompt and +100 output tokens; 20 more first tokens
	// taking 6 s, 50 more output-token gaps taking 1.5 s.
	second := scrapeAt(t, sec(2), signalBody(1400, 600, 16, 120, 3.5, 250, "vllm:inter_token_latency_seconds"), first)
	require.True(t, second.rates)
	require.InDelta(t, 200, second.promptRate, 1e-9)
	require.InDelta(t, 50, second.generationRate, 1e-9)
	require.True(t, second.ttft.ok)
	require.InDelta(t, 0.3, second.ttft.v, 1e-9)
	require.InDelta(t, 0.03, second.tpot.v, 1e-9)

	// Idle for the next interval: rates fall to 0, means are kept.
	idle := scrapeAt(t, sec(4), signalBody(1400, 600, 16, 120, 3.5, 250, "vllm:inter_token_latency_seconds"), second)
	require.True(t, idle.rates)
	require.Zero(t, idle.promptRate)
	require.Zero(t, idle.generationRate)
	require.Equal(t, second.ttft, idle.ttft)
	require.Equal(t, second.tpot, idle.tpot)

	// The replica restarted: counters went down. No rate for this interval;
	// the means are those since the restart.
	restarted := scrapeAt(t, sec(6), signalBody(80, 40, 1, 4, 0.2, 10, "vllm:inter_token_latency_seconds"), idle)
	require.False(t, restarted.rates)
	require.InDelta(t, 0.25, restarted.ttft.v, 1e-9)
	require.InDelta(t, 0.02, restarted.tpot.v, 1e-9)
	// A restart with nothing served yet keeps the last mean.
	empty := scrapeAt(t, sec(6), signalBody(0, 0, 0, 0, 0, 0, "vllm:inter_token_latency_seconds"), idle)
	require.Equal(t, idle.ttft, empty.ttft)

	// Older vLLM's name for the time per output token is read too.
	old1 := scrapeAt(t, t0, signalBody(0, 0, 0, 0, 1, 10, "vllm:time_per_output_token_seconds"), nil)
	old2 := scrapeAt(t, sec(1), signalBody(0, 0, 0, 0, 3, 20, "vllm:time_per_output_token_seconds"), old1)
	require.InDelta(t, 0.2, old2.tpot.v, 1e-9)

	// A replica that stops exporting a histogram has no mean for it.
	gone := scrapeAt(t, sec(8), signalBody(1400, 600, 16, 120, 0, 0, ""), second)
	require.False(t, gone.tpot.ok)
	require.True(t, gone.ttft.ok)

	// Without the counters there is no rate, however many scrapes.
	bare := "vllm:num_requests_running 0\n"
	a := scrapeAt(t, t0, bare, nil)
	require.False(t, scrapeAt(t, sec(1), bare, a).rates)
}

// The pool derives the signals from successive scrapes and hands them to
// the policy in each Candidate.
func TestScrapeFeedsSignalsToCandidates(t *testing.T) {
	var n atomic.Int64
	bodies := []string{
		signalBody(1000, 500, 10, 100, 2, 200, "vllm:inter_token_latency_seconds"),
		signalBody(1400, 600, 16, 120, 3.5, 250, "vllm:inter_token_latency_seconds"),
	}
	srv := replicaServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			io.WriteString(w, bodies[min(int(n.Add(1))-1, len(bodies)-1)])
		}
	})
	cfg := testConfig(srv.URL)
	cfg.ScrapeInterval = Duration(2 * time.Second)
	var seen policy.Candidate
	f := newFixture(t, cfg, &stubPicker{pick: func(_ *policy.Request, cands []policy.Candidate) int {
		seen = cands[0]
		return 0
	}}, nil)
	p, ctx := f.pool, context.Background()
	do := func() {
		t.Helper()
		resp, err := p.Do(ctx, &ForwardRequest{Path: "/metrics"})
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
	}

	p.scrapeOnce(ctx)
	do()
	require.True(t, seen.Fresh)
	require.False(t, seen.Rates)
	require.False(t, seen.HasTTFT)
	st := p.Replicas()[0]
	require.Nil(t, st.PromptTokensPerSec, "unknown: left out of the status")
	require.Nil(t, st.MeanTTFTSeconds)

	f.clock.advance(2 * time.Second)
	p.scrapeOnce(ctx)
	do()
	require.True(t, seen.Rates)
	require.InDelta(t, 200, seen.PromptTokensPerSec, 1e-9)
	require.InDelta(t, 50, seen.GenerationTokensPerSec, 1e-9)
	require.True(t, seen.HasTTFT)
	require.InDelta(t, 0.3, seen.MeanTTFT, 1e-9)
	require.True(t, seen.HasTPOT)
	require.InDelta(t, 0.03, seen.MeanTPOT, 1e-9)

	st = p.Replicas()[0]
	require.NotNil(t, st.PromptTokensPerSec)
	require.InDelta(t, 200, *st.PromptTokensPerSec, 1e-9)
	require.NotNil(t, st.MeanTTFTSeconds)
	require.InDelta(t, 0.3, *st.MeanTTFTSeconds, 1e-9)
}

// The signal policies, built from the pool's config, pick the replica that
// the scraped signals favour; a drained replica is not a candidate, and with
// none left the pool answers ErrNoHealthyReplica without asking the policy.
func TestSignalPoliciesFollowTheScrapes(t *testing.T) {
	// r1 reads better than r0 on every signal after two scrapes: emptier KV
	// cache, fewer running, fewer tokens per second, lower TTFT and TPOT.
	scrapes := map[string][]string{
		"r0": {
			"vllm:kv_cache_usage_perc 0.8\n" + signalBody(0, 0, 0, 0, 0, 0, "vllm:inter_token_latency_seconds"),
			"vllm:kv_cache_usage_perc 0.8\n" + signalBody(4000, 2000, 10, 10, 5, 100, "vllm:inter_token_latency_seconds"),
		},
		"r1": {
			"vllm:kv_cache_usage_perc 0.1\n" + signalBody(0, 0, 0, 0, 0, 0, "vllm:inter_token_latency_seconds"),
			"vllm:kv_cache_usage_perc 0.1\n" + signalBody(400, 200, 2, 10, 1, 100, "vllm:inter_token_latency_seconds"),
		},
	}
	for _, name := range []string{"least-kv-cache", "least-gpu-cache", "least-utilization", "throughput", "least-latency"} {
		t.Run(name, func(t *testing.T) {
			var step atomic.Int64
			serve := func(id string) string {
				return replicaServer(t, func(w http.ResponseWriter, r *http.Request) {
					if r.URL.Path == "/metrics" {
						io.WriteString(w, scrapes[id][min(int(step.Load()), 1)])
						return
					}
					io.WriteString(w, "{}")
				}).URL
			}
			cfg := testConfig(serve("r0"), serve("r1"))
			cfg.ScrapeInterval = Duration(2 * time.Second)
			cfg.Policy.Name = name
			cfg.Policy.Trace.Enabled = true
			f := newFixture(t, cfg, nil, nil)
			p, ctx := f.pool, context.Background()
			pick := func() (string, error) {
				resp, err := p.Do(ctx, &ForwardRequest{Method: "GET", Path: "/v1/models"})
				if err != nil {
					return "", err
				}
				require.NoError(t, resp.Body.Close())
				return resp.ReplicaID, nil
			}

			p.scrapeOnce(ctx)
			step.Store(1)
			f.clock.advance(2 * time.Second)
			p.scrapeOnce(ctx)
			for range 3 {
				id, err := pick()
				require.NoError(t, err)
				require.Equal(t, "r1", id)
			}
			require.Empty(t, p.Tracer().Recent(1)[0].Note, "decided by the signal, not the fallback")

			require.NoError(t, p.Drain("r1"))
			id, err := pick()
			require.NoError(t, err)
			require.Equal(t, "r0", id, "the best replica drained: the other one")

			require.NoError(t, p.Drain("r0"))
			_, err = pick()
			require.ErrorIs(t, err, ErrNoHealthyReplica)
		})
	}
}
