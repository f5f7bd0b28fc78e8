package upstream

import (
	"context"
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

func TestParseVLLMMetrics(t *testing.T) {
	l, err := parseVLLMMetrics(strings.NewReader(vllmMetrics))
	require.NoError(t, err)
	require.Equal(t, 4, l.waiting, "summed across engines")
	require.Equal(t, 12, l.running)
	require.InDelta(t, 0.375, l.kv, 1e-9, "averaged across engines")

	old := "# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc{model_name=\"m\"} 0.9\n" +
		"vllm:num_requests_waiting{model_name=\"m\"} 2\n" // untyped
	l, err = parseVLLMMetrics(strings.NewReader(old))
	require.NoError(t, err)
	require.InDelta(t, 0.9, l.kv, 1e-9, "falls back to the pre-v1 name")
	require.Equal(t, 2, l.waiting)

	_, err = parseVLLMMetrics(strings.NewReader("# TYPE up gauge\nup 1\n"))
	require.ErrorContains(t, err, "no vllm:")
	_, err = parseVLLMMetrics(strings.NewReader("vllm:num_requests_running{ 1\n"))
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
