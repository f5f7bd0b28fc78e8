package server

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/classifier"
	"github.com/triage-gw/triage/router"
)

// GET /health is the liveness route vLLM and most OpenAI-compatible servers serve, which
// benchmark clients and orchestrators probe.
func TestHealthIsLiveness(t *testing.T) {
	ts := startServer(t)
	for _, path := range []string{"/health", "/healthz"} {
		resp, body := do(t, http.MethodGet, ts.url+path, "", nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
		require.JSONEq(t, `{"status":"ok"}`, string(body), path)
	}
}

func TestModelsListsTheRoutedModelFirst(t *testing.T) {
	ts := startServer(t, func(c *gatewayConfig, _ *testOptions) { c.Routing.ModelAliases = []string{"auto", "triage"} })
	resp, body := do(t, http.MethodGet, ts.url+"/v1/models", "", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var list modelList
	require.NoError(t, json.Unmarshal(body, &list))
	var ids, owners []string
	for _, m := range list.Data {
		ids, owners = append(ids, m.ID), append(owners, m.OwnedBy)
		require.Equal(t, "model", m.Object)
	}
	require.Equal(t, []string{"auto", "triage", "model-fast", "model-slow"}, ids)
	require.Equal(t, []string{"triage", "triage", "triage/fast", "triage/slow"}, owners)
}

// A model one pool serves pins the request there: no classification, reason pinned, no
// score headers; the model is still rewritten to the replica's.
func TestPinnedModelSkipsTheClassifier(t *testing.T) {
	ts := startServer(t)
	before := len(ts.model.seen())
	for _, tc := range []struct{ model, text, path string }{
		{"model-slow", "hi p=0.1", "slow"},    // the model would say fast
		{"model-fast", "epic p=0.99", "fast"}, // the model would say slow
	} {
		resp, body := postJSON(t, ts.url+"/v1/chat/completions",
			`{"model":"`+tc.model+`","messages":[{"role":"user","content":"`+tc.text+`"}]}`)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		require.Equal(t, tc.path, resp.Header.Get(HeaderPath))
		require.Equal(t, "pinned", resp.Header.Get(HeaderReason))
		require.Empty(t, resp.Header.Get(HeaderPSlow), "nothing was classified")
		require.NotEmpty(t, resp.Header.Get(HeaderLatency))
	}
	require.Len(t, ts.model.seen(), before, "pinned requests are not classified")
	require.Len(t, ts.slow.requests(), 1)
	require.Equal(t, "model-slow", ts.slow.requests()[0].body["model"])
	require.Equal(t, 0, ts.router.State().SlowActive, "the pinned slow request released its slot")

	// "auto", no model, and names nobody serves are routed (unknown_model: route).
	for _, model := range []string{`"model":"auto",`, ``, `"model":null,`, `"model":"gpt-4o",`, `"model":"Model-Slow",`} {
		resp, body := postJSON(t, ts.url+"/v1/chat/completions", `{`+model+`"messages":[{"role":"user","content":"epic p=0.99"}]}`)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		require.Equal(t, "slow_granted", resp.Header.Get(HeaderReason), model)
	}

	resp, body := postJSON(t, ts.url+"/v1/chat/completions", `{"model":7,"messages":[{"role":"user","content":"x"}]}`)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Equal(t, "model", *apiErr(t, body).Param)
}

func TestPinnedSlowHoldsASlotAndIs429WhenSaturated(t *testing.T) {
	g := newGate()
	defer g.release()
	ts := startServer(t, func(c *gatewayConfig, _ *testOptions) { c.Decision.MaxSlowConcurrency = 1 })
	ts.slow.onGenerate = func(w http.ResponseWriter, r *http.Request, _ []byte) {
		if g.wait(r) {
			w.Write([]byte(`{}`))
		}
	}
	chat := `{"model":"model-slow","messages":[{"role":"user","content":"hi"}]}`
	var wg sync.WaitGroup
	defer wg.Wait()
	first := make(chan int, 1)
	wg.Go(func() {
		resp, _, err := tryPostJSON(ts.url+"/v1/chat/completions", chat)
		if err == nil {
			first <- resp.StatusCode
		}
	})
	g.awaitArrivals(t, 1)
	require.Equal(t, 1, ts.router.State().SlowActive, "the pinned request holds the slot")

	resp, body := postJSON(t, ts.url+"/v1/chat/completions", chat)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, string(body))
	require.Equal(t, "1", resp.Header.Get("Retry-After"))
	require.Equal(t, "slow_saturated", *apiErr(t, body).Code)

	resp, body = postJSON(t, ts.url+"/v1/chat/completions", `{"messages":[{"role":"user","content":"epic p=0.99"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Equal(t, "slow_saturated", resp.Header.Get(HeaderReason), "routed requests see the pinned load and are shed")

	g.release()
	require.Equal(t, http.StatusOK, <-first)
}

func TestUnknownModelCanBeRejected(t *testing.T) {
	ts := startServer(t, func(c *gatewayConfig, _ *testOptions) { c.Routing.UnknownModel = router.UnknownModelReject })
	resp, body := postJSON(t, ts.url+"/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusNotFound, resp.StatusCode, string(body))
	e := apiErr(t, body)
	require.Equal(t, "model_not_found", *e.Code)
	require.Equal(t, "invalid_request_error", e.Type)
	require.Equal(t, "model", *e.Param)
	require.Contains(t, e.Message, `"gpt-4o"`)
	resp, body = postJSON(t, ts.url+"/v1/completions", `{"model":"auto","prompt":"hi"}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	resp, body = postJSON(t, ts.url+"/v1/completions", `{"model":"model-fast","prompt":"hi"}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Len(t, ts.model.seen(), 2, "the probe and the auto request only")
}

// heldClassifier makes the fake model block every batch holding the text "hold" until the
// returned release, and returns a channel announcing each such batch.
func heldClassifier(t *testing.T, m *fakeModel) (started <-chan struct{}, release func()) {
	st, open := make(chan struct{}, 16), make(chan struct{})
	release = sync.OnceFunc(func() { close(open) })
	t.Cleanup(release)
	m.classify = func(ctx context.Context, texts []string) ([]classifier.Result, error) {
		for _, s := range texts {
			if s == "hold" {
				st <- struct{}{}
				select {
				case <-open:
				case <-ctx.Done():
				}
			}
		}
		return scoreTexts(texts), nil
	}
	return st, release
}

// The classifier never fails a routed request: past the budget, or with the queue full, the
// request goes to the fallback pool, with its reason and a metric; /v1/classify, whose
// answer is the classification, still answers 429. A classification the request stopped
// waiting for fills the cache.
func TestRoutedRequestsFailOpen(t *testing.T) {
	ts := startServer(t, func(c *gatewayConfig, _ *testOptions) {
		c.Batcher.MaxBatch, c.Batcher.QueueSize, c.Batcher.Workers = 1, 1, 1
		c.Routing.ClassifyBudget = 30 * time.Millisecond
	})
	started, release := heldClassifier(t, ts.model)
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { tryPostJSON(ts.url+"/v1/classify", `{"text":"hold"}`) })
	<-started

	// Queued behind the held batch: the budget runs out.
	resp, body := postJSON(t, ts.url+"/v1/chat/completions", `{"model":"auto","messages":[{"role":"user","content":"epic p=0.99"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Equal(t, "fast", resp.Header.Get(HeaderPath))
	require.Equal(t, "classifier_timeout", resp.Header.Get(HeaderReason))
	require.Empty(t, resp.Header.Get(HeaderPSlow))

	// The one queue slot is taken by that text (still queued for the cache), so the next is
	// turned away by the queue.
	require.Equal(t, 1, ts.router.State().QueueLen)
	resp, body = postJSON(t, ts.url+"/v1/query-process", `{"text":"another p=0.99"}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Equal(t, `{"label":"0"}`, string(body))
	require.Equal(t, "classifier_busy", resp.Header.Get(HeaderReason))

	resp, body = postJSON(t, ts.url+"/v1/classify", `{"text":"a third"}`)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, string(body))
	require.Equal(t, "classifier_queue_full", *apiErr(t, body).Code)

	_, metrics := do(t, http.MethodGet, ts.url+"/metrics", "", nil)
	require.Contains(t, string(metrics), `triage_classifier_fallbacks_total{reason="classifier_timeout"} 1`)
	require.Contains(t, string(metrics), `triage_classifier_fallbacks_total{reason="classifier_busy"} 1`)
	require.Contains(t, string(metrics), `triage_decisions_total{path="fast",reason="classifier_timeout"} 1`)

	release()
	eventually(t, func() bool {
		_, metrics := do(t, http.MethodGet, ts.url+"/metrics", "", nil)
		return strings.Contains(string(metrics), `triage_classifications_total{stage="encoder"} 2`)
	}, "the held text and the abandoned one are classified")
	ts.router.WaitCache()
	resp, body = postJSON(t, ts.url+"/v1/chat/completions", `{"model":"auto","messages":[{"role":"user","content":"epic p=0.99"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Equal(t, "slow_granted", resp.Header.Get(HeaderReason))
	require.Equal(t, "hit", resp.Header.Get(HeaderCache))
}

// With fallback reject the classifier's failures are answered as before fail-open: 429.
func TestFallbackRejectAnswers429(t *testing.T) {
	ts := startServer(t, func(c *gatewayConfig, _ *testOptions) {
		c.Routing.ClassifyBudget = 30 * time.Millisecond
		c.Routing.Fallback = router.FallbackReject
	})
	started, _ := heldClassifier(t, ts.model)
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { tryPostJSON(ts.url+"/v1/classify", `{"text":"hold"}`) })
	<-started
	resp, body := postJSON(t, ts.url+"/v1/chat/completions", `{"messages":[{"role":"user","content":"waits"}]}`)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, string(body))
	require.Equal(t, "1", resp.Header.Get("Retry-After"))
	require.Equal(t, "classifier_timeout", *apiErr(t, body).Code)
}
