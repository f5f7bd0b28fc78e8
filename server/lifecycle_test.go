package server

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/classifier"
	"github.com/triage-gw/triage/router"
)

func TestQueueFullIs429WithRetryAfter(t *testing.T) {
	started, unblock := make(chan struct{}, 1), make(chan struct{})
	release := sync.OnceFunc(func() { close(unblock) })
	defer release()
	ts := startServer(t, func(c *gatewayConfig, _ *testOptions) {
		c.Batcher.MaxBatch, c.Batcher.QueueSize, c.Batcher.Workers = 1, 1, 1
		c.Routing.Fallback = router.FallbackReject // today's 429; fail-open is tested in fallback_test.go
	})
	ts.model.classify = func(ctx context.Context, texts []string) ([]classifier.Result, error) {
		if texts[0] == "first" {
			started <- struct{}{}
			select {
			case <-unblock:
			case <-ctx.Done():
			}
		}
		return scoreTexts(texts), nil
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	codes := make(chan int, 2)
	post := func(text string) {
		defer wg.Done()
		resp, err := http.Post(ts.url+"/v1/classify", "application/json", strings.NewReader(`{"text":"`+text+`"}`))
		if err == nil {
			resp.Body.Close()
			codes <- resp.StatusCode
		}
	}
	wg.Add(2)
	go post("first") // runs, held
	<-started
	go post("second") // fills the one queue slot
	eventually(t, func() bool { return ts.router.State().QueueLen == 1 }, "second text queued")

	resp, body := postJSON(t, ts.url+"/v1/query-process", `{"text":"third"}`)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, string(body))
	require.Equal(t, "1", resp.Header.Get("Retry-After"))
	require.Equal(t, "classifier_queue_full", *apiErr(t, body).Code)

	release()
	wg.Wait()
	close(codes)
	for c := range codes {
		require.Equal(t, http.StatusOK, c)
	}
}

func TestMetricsExposeEverySeries(t *testing.T) {
	ts := startServer(t)
	postJSON(t, ts.url+"/v1/query-process", `{"text":"p=0.9 metrics"}`)
	postJSON(t, ts.url+"/v1/query-process", `{"text":"p=0.9 metrics"}`)
	do(t, http.MethodGet, ts.url+"/nope", "", nil)
	resp, body := do(t, http.MethodGet, ts.url+"/metrics", "", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	m := string(body)
	for _, want := range []string{
		`triage_requests_total{code="200",endpoint="query_process"} 2`,
		`triage_requests_total{code="404",endpoint="none"} 1`,
		`triage_decisions_total{path="slow",reason="slow_granted"} 2`,
		`triage_router_latency_seconds_bucket{le="0.0001"}`,
		`triage_router_latency_seconds_count 2`,
		`triage_cache_requests_total{result="miss"}`,
		`triage_cache_requests_total{result="hit"}`,
		`triage_cache_evictions_total 0`,
		`triage_slow_active 0`,
		`triage_slow_load 0`,
		`triage_decision_threshold 0.5`,
		`triage_model_info{version="v1"} 1`,
		`triage_model_reloads_total{result="ok"} 0`,
		`triage_inflight_requests 1`, // this scrape
		`triage_batcher_batch_size_bucket`,
		`triage_upstream_requests_total{outcome="ok",pool="slow",replica="slow-0"} 2`,
		`go_goroutines`,
		`process_`,
	} {
		require.Contains(t, m, want)
	}
}

func TestHealthzAndReadyz(t *testing.T) {
	ts := startServer(t)
	resp, body := do(t, http.MethodGet, ts.url+"/healthz", "", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.JSONEq(t, `{"status":"ok"}`, string(body))
	resp, body = do(t, http.MethodGet, ts.url+"/readyz", "", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.JSONEq(t, `{"ready":true,"model_loaded":true,"fast_pool_healthy":true,"slow_pool_healthy":true,"draining":false}`, string(body))
}

// TestGracefulShutdownLetsInFlightRequestsFinish: a request running when shutdown starts
// completes normally; readiness dropped meanwhile; then everything stops and the model is
// closed.
func TestGracefulShutdownLetsInFlightRequestsFinish(t *testing.T) {
	g := newGate()
	defer g.release()
	ts := startServer(t)
	ts.slow.onGenerate = func(w http.ResponseWriter, r *http.Request, _ []byte) {
		if g.wait(r) {
			w.Write([]byte(`{}`))
		}
	}
	type result struct {
		code int
		body string
	}
	res := make(chan result, 1)
	go func() {
		resp, err := http.Post(ts.url+"/v1/query-process", "application/json", strings.NewReader(`{"text":"p=0.9 long job"}`))
		if err != nil {
			res <- result{code: -1, body: err.Error()}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		res <- result{resp.StatusCode, string(b)}
	}()
	g.awaitArrivals(t, 1)

	stopped := make(chan error, 1)
	go func() { stopped <- ts.stop() }()
	eventually(t, func() bool { return !ts.readiness().Ready }, "readiness drops at once")
	require.False(t, ts.model.closed.Load(), "the model outlives the drain")

	g.release()
	r := <-res
	require.Equal(t, http.StatusOK, r.code, r.body)
	require.Equal(t, `{"label":"1"}`, r.body)
	require.NoError(t, <-stopped)
	require.True(t, ts.model.closed.Load(), "the classifier is closed at the end")
	require.Equal(t, 0, ts.router.State().SlowActive)
}

// TestShutdownCutsWhatOutlivesTheBound: a stream that does not end within
// shutdown_timeout is cut and Run still returns.
func TestShutdownCutsWhatOutlivesTheBound(t *testing.T) {
	g := newGate()
	defer g.release()
	ts := startServer(t, func(c *gatewayConfig, _ *testOptions) { c.Server.ShutdownTimeout = 200 * time.Millisecond })
	ts.fast.onGenerate = func(w http.ResponseWriter, r *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write([]byte("data: {}\n\n"))
		w.(http.Flusher).Flush()
		g.wait(r)
	}
	resp, err := http.Post(ts.url+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"stream":true,"messages":[{"role":"user","content":"forever"}]}`))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	require.NoError(t, ts.stop())
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err, "the cut SSE stream still ends cleanly")
	require.True(t, strings.HasPrefix(string(b), "data: {}\n\nevent: error\ndata: {\"error\":"), "%s", b)
	require.Contains(t, string(b), `"code":"shutting_down"`)
	require.True(t, strings.HasSuffix(string(b), "\n\ndata: [DONE]\n\n"), "%s", b)
	require.Equal(t, 0, ts.active.count())
	require.True(t, ts.model.closed.Load())
}
