package server

import (
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var latencyRE = regexp.MustCompile(`^\d+\.\d{3}$`)

func TestQueryProcessRoutesByModelAndExecutesOnTheChosenPool(t *testing.T) {
	ts := startServer(t)
	for _, tc := range []struct {
		name, text   string
		label, path  string
		reason, pool string
		upstream     *fakeUpstream
	}{
		{"fast", "what is 2+2 p=0.2", "0", "fast", "fast_model", "fast-0", ts.fast},
		{"slow", "write a long poem p=0.9", "1", "slow", "slow_granted", "slow-0", ts.slow},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(tc.upstream.requests())
			resp, body := postJSON(t, ts.url+"/v1/query-process", `{"text": "`+tc.text+`"}`)
			require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
			require.Equal(t, `{"label":"`+tc.label+`"}`, string(body))
			require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			require.Equal(t, tc.path, resp.Header.Get(HeaderPath))
			require.Equal(t, tc.reason, resp.Header.Get(HeaderReason))
			require.Equal(t, tc.pool, resp.Header.Get(HeaderReplica))
			require.Equal(t, "miss", resp.Header.Get(HeaderCache))
			require.Equal(t, "0.5000", resp.Header.Get(HeaderThreshold))
			require.Regexp(t, latencyRE, resp.Header.Get(HeaderLatency))
			st := resp.Header.Get("Server-Timing")
			for _, part := range []string{`cache;desc="miss";dur=`, "queue;dur=", "inference;dur=", "decision;dur="} {
				require.Contains(t, st, part)
			}

			// Executed: one small chat completion with the pool's model and max_tokens.
			reqs := tc.upstream.requests()
			require.Len(t, reqs, before+1)
			got := reqs[len(reqs)-1]
			require.Equal(t, "/v1/chat/completions", got.path)
			require.Equal(t, "model-"+tc.path, got.body["model"])
			require.EqualValues(t, 16, got.body["max_tokens"])
			msgs := got.body["messages"].([]any)
			require.Equal(t, tc.text, msgs[0].(map[string]any)["content"])

			// The same text again (spacing aside) is a cache hit, decided again.
			resp, body = postJSON(t, ts.url+"/v1/query-process", `{"text": "  `+strings.ReplaceAll(tc.text, " ", `\n\t `)+`"}`)
			require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
			require.Equal(t, "hit", resp.Header.Get(HeaderCache))
			require.Equal(t, tc.reason, resp.Header.Get(HeaderReason))
		})
	}
	require.Equal(t, 0, ts.router.State().SlowActive, "every slow slot is released after execution")
}

func TestQueryProcessClassifiesInstructionSEPContext(t *testing.T) {
	ts := startServer(t)
	resp, body := postJSON(t, ts.url+"/v1/query-process", `{"text": " Summarise this ", "context": "A  long\tdocument."}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Contains(t, ts.model.seen(), "Summarise this [SEP] A long document.")
	msgs := ts.fast.requests()[0].body["messages"].([]any)
	require.Equal(t, " Summarise this \n\nA  long\tdocument.", msgs[0].(map[string]any)["content"])
}

func TestSlowSlotIsHeldUntilExecutionEndsThenShedsWhenFull(t *testing.T) {
	g := newGate()
	ts := startServer(t, func(c *gatewayConfig, _ *testOptions) {
		c.Decision.MaxSlowConcurrency = 1
		c.Decision.Alpha = 0 // keep the threshold at 0.5 so only the semaphore sheds
	})
	ts.slow.onGenerate = func(w http.ResponseWriter, r *http.Request, _ []byte) {
		if g.wait(r) {
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"choices":[]}`))
		}
	}
	first := make(chan *http.Response, 1)
	go func() {
		resp, _ := http.Post(ts.url+"/v1/query-process", "application/json", strings.NewReader(`{"text":"essay p=0.9"}`))
		first <- resp
	}()
	g.awaitArrivals(t, 1)
	require.Equal(t, 1, ts.router.State().SlowActive, "the slot is held while the slow execution runs")

	resp, body := postJSON(t, ts.url+"/v1/query-process", `{"text":"another essay p=0.9"}`)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, `{"label":"0"}`, string(body))
	require.Equal(t, "slow_saturated", resp.Header.Get(HeaderReason))
	require.Equal(t, "fast-0", resp.Header.Get(HeaderReplica))

	g.release()
	r1 := <-first
	require.NotNil(t, r1)
	r1.Body.Close()
	require.Equal(t, "slow_granted", r1.Header.Get(HeaderReason))
	eventually(t, func() bool { return ts.router.State().SlowActive == 0 }, "slot released")
}

func TestThresholdRisesWithSlowLoad(t *testing.T) {
	g := newGate()
	ts := startServer(t, func(c *gatewayConfig, _ *testOptions) { c.Decision.MaxSlowConcurrency = 2 })
	ts.slow.onGenerate = func(w http.ResponseWriter, r *http.Request, _ []byte) {
		g.wait(r)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		resp, err := http.Post(ts.url+"/v1/query-process", "application/json", strings.NewReader(`{"text":"hold p=0.99"}`))
		if err == nil {
			resp.Body.Close()
		}
	}()
	g.awaitArrivals(t, 1)
	// load 0.5: threshold 0.5 + 0.45*0.25 = 0.6125.
	resp, body := postJSON(t, ts.url+"/v1/query-process", `{"text":"maybe p=0.6"}`)
	require.Equal(t, `{"label":"0"}`, string(body))
	require.Equal(t, "load_shedding", resp.Header.Get(HeaderReason))
	require.Equal(t, "0.6125", resp.Header.Get(HeaderThreshold))

	resp, body = postJSON(t, ts.url+"/v1/classify", `{"text":"surely p=0.7"}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Contains(t, string(body), `"reason":"slow_granted"`)
	require.Contains(t, string(body), `"threshold":0.6125`)
	g.release()
	<-done
}

func TestSlowUnhealthyShedsToFast(t *testing.T) {
	ts := startServer(t)
	resp, body := postJSON(t, ts.url+"/admin/drain", `{"pool":"slow","replica":"slow-0"}`, "Authorization", "Bearer "+testToken)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Contains(t, string(body), `"state":"draining"`)

	resp, body = postJSON(t, ts.url+"/v1/query-process", `{"text":"p=0.9"}`)
	require.Equal(t, `{"label":"0"}`, string(body))
	require.Equal(t, "slow_unhealthy", resp.Header.Get(HeaderReason))
	require.Equal(t, "fast-0", resp.Header.Get(HeaderReplica))

	resp, body = do(t, http.MethodGet, ts.url+"/readyz", "", nil)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.Contains(t, string(body), `"slow_pool_healthy":false`)

	resp, _ = postJSON(t, ts.url+"/admin/undrain", `{"pool":"slow","replica":"slow-0"}`, "Authorization", "Bearer "+testToken)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp, _ = do(t, http.MethodGet, ts.url+"/readyz", "", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

func TestGreyZonePolicyUsesQueueLength(t *testing.T) {
	ts := startServer(t, func(c *gatewayConfig, _ *testOptions) { c.Decision.Policy = "grey-zone" })
	// Idle queue (< low_queue): a grey-zone text goes slow.
	resp, body := postJSON(t, ts.url+"/v1/query-process", `{"text":"hmm p=0.48"}`)
	require.Equal(t, `{"label":"1"}`, string(body))
	require.Equal(t, "grey_zone_slow", resp.Header.Get(HeaderReason))
}

func TestExecutionFailureIsAnErrorNotALabel(t *testing.T) {
	ts := startServer(t)
	ts.fast.onGenerate = func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.WriteHeader(http.StatusInternalServerError)
		w.Write([]byte(`{"error":{"message":"boom"}}`))
	}
	resp, body := postJSON(t, ts.url+"/v1/query-process", `{"text":"p=0.1"}`)
	require.Equal(t, http.StatusBadGateway, resp.StatusCode, string(body))
	e := apiErr(t, body)
	require.Equal(t, "upstream_status", *e.Code)
	require.Contains(t, e.Message, "status 500")
	require.Equal(t, "fast", resp.Header.Get(HeaderPath), "decision headers are set on error answers too")

	ts.fast.onGenerate = func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.Header().Set("Retry-After", "3")
		w.WriteHeader(http.StatusTooManyRequests)
	}
	resp, body = postJSON(t, ts.url+"/v1/query-process", `{"text":"p=0.11"}`)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, string(body))
	require.Equal(t, "3", resp.Header.Get("Retry-After"))
}
