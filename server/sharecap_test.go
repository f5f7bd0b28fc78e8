package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSlowShareCap routes requests that the model all calls slow under a 25% cap: once the
// window holds enough of them only the top quarter of scores go slow, the rest fast with
// reason budget_shedding; /v1/classify, the metrics and the admin status explain the
// threshold's parts.
func TestSlowShareCap(t *testing.T) {
	ts := startServer(t, func(c *gatewayConfig, _ *testOptions) {
		c.Decision.MaxSlowShare = 0.25
		c.Decision.ShareWindow = time.Hour
	})
	reasons := map[string]int{}
	const n = 200
	for i := range n {
		p := 0.6 + 0.39*float64(i*37%n)/n // every score in [0.6, 0.99), shuffled
		resp, body := postJSON(t, ts.url+"/v1/chat/completions",
			fmt.Sprintf(`{"messages":[{"role":"user","content":"task %d p=%.4f"}]}`, i, p))
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		reasons[resp.Header.Get(HeaderReason)]++
		if resp.Header.Get(HeaderReason) == "budget_shedding" {
			require.Equal(t, "fast", resp.Header.Get(HeaderPath))
			thr := resp.Header.Get(HeaderThreshold)
			require.NotEqual(t, "0.5000", thr, "the threshold reported is the budget's floor")
		}
	}
	require.Greater(t, reasons["budget_shedding"], n/2, "%v", reasons)
	// The first ShareMinSamples go slow before the budget has enough requests to apply.
	require.Less(t, reasons["slow_granted"], 50+n/4+10, "%v", reasons)
	require.Equal(t, n, reasons["budget_shedding"]+reasons["slow_granted"], "%v", reasons)

	resp, body := postJSON(t, ts.url+"/v1/classify", `{"texts":["low p=0.62","high p=0.99"]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	var out classifyResponse
	require.NoError(t, json.Unmarshal(body, &out))
	low, high := out.Results[0], out.Results[1]
	require.Equal(t, "budget_shedding", low.Reason)
	require.Equal(t, "slow_granted", high.Reason)
	require.Equal(t, 0.5, low.ThresholdParts.Load)
	require.Greater(t, low.ThresholdParts.ShareFloor, 0.62)
	require.Equal(t, low.ThresholdParts.ShareFloor, low.Threshold, "the stricter part is the threshold")

	require.Equal(t, 0.25, metricValue(t, ts.url, "triage_slow_share_max"))
	require.Equal(t, low.ThresholdParts.ShareFloor, metricValue(t, ts.url, "triage_decision_budget_threshold"))
	require.Equal(t, low.Threshold, metricValue(t, ts.url, "triage_decision_threshold"))
	share := metricValue(t, ts.url, "triage_slow_share")
	require.InDelta(t, float64(reasons["slow_granted"])/n, share, 1e-9)

	resp, body = do(t, http.MethodGet, ts.url+"/admin/status", "", nil, "Authorization", "Bearer "+testToken)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	var st statusResponse
	require.NoError(t, json.Unmarshal(body, &st))
	require.Equal(t, 0.25, st.SlowPath.ShareMax)
	require.Equal(t, n, st.SlowPath.ShareRequests, "classify previews are not counted")
	require.InDelta(t, share, st.SlowPath.Share, 1e-6)
	require.Equal(t, low.ThresholdParts.ShareFloor, st.SlowPath.ShareFloor)
}

// TestSlowShareTokens measures the share in tokens (decision.share_unit: tokens): each routed
// request weighs the tokens its replica reported, whether it came through the OpenAI
// endpoints or query-process, and one whose answer carries no usage weighs the window's mean.
func TestSlowShareTokens(t *testing.T) {
	answer := func(tokens int) func(w http.ResponseWriter, r *http.Request, body []byte) {
		return func(w http.ResponseWriter, r *http.Request, body []byte) {
			w.Header().Set("Content-Type", "application/json")
			out := map[string]any{"object": "chat.completion",
				"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": "ok"}, "finish_reason": "stop"}}}
			if !bytes.Contains(body, []byte("no usage")) {
				out["usage"] = map[string]any{"prompt_tokens": tokens / 2, "completion_tokens": tokens - tokens/2}
			}
			json.NewEncoder(w).Encode(out)
		}
	}
	ts := startServer(t, func(c *gatewayConfig, _ *testOptions) {
		c.Decision.ShareUnit = "tokens" // no cap: the share is measured only
	})
	ts.fast.onGenerate, ts.slow.onGenerate = answer(10), answer(30)

	for i, text := range []string{"a p=0.9", "b p=0.1", "c p=0.1", "d p=0.1", "e p=0.1"} {
		resp, body := postJSON(t, ts.url+"/v1/chat/completions", fmt.Sprintf(`{"messages":[{"role":"user","content":%q}]}`, text))
		require.Equal(t, http.StatusOK, resp.StatusCode, "%d: %s", i, body)
	}
	resp, body := postJSON(t, ts.url+"/v1/query-process", `{"text":"f p=0.9"}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Equal(t, "slow", resp.Header.Get(HeaderPath))

	status := func() statusSlow {
		resp, body := do(t, http.MethodGet, ts.url+"/admin/status", "", nil, "Authorization", "Bearer "+testToken)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		var st statusResponse
		require.NoError(t, json.Unmarshal(body, &st))
		return st.SlowPath
	}
	// A proxied request is observed when its response stream closes, just after the client
	// has read it.
	eventually(t, func() bool { return status().ShareRequests == 6 }, "six requests observed")
	st := status()
	require.Equal(t, "tokens", st.ShareUnit)
	require.InDelta(t, 60.0/100, st.Share, 1e-6, "2 slow of 30 tokens, 4 fast of 10: 60%% of the tokens, a third of the requests")

	// An answer without usage weighs the mean: 100/6 tokens.
	resp, body = postJSON(t, ts.url+"/v1/chat/completions", `{"messages":[{"role":"user","content":"g p=0.9 no usage"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	eventually(t, func() bool { return status().ShareRequests == 7 }, "the unmetered request observed")
	mean := 100.0 / 6
	require.InDelta(t, (60+mean)/(100+mean), status().Share, 1e-6)
	require.InDelta(t, (60+mean)/(100+mean), metricValue(t, ts.url, "triage_slow_share"), 1e-9)
}
