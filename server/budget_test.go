package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/config"
)

// TestSlowShareBudget routes requests that the model all calls slow under a 25% cap: once the
// window holds enough of them only the top quarter of scores go slow, the rest fast with
// reason budget_shedding; /v1/classify, the metrics and the admin status explain the
// threshold's parts.
func TestSlowShareBudget(t *testing.T) {
	ts := startServer(t, func(c *config.Config, _ *testOptions) {
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
	require.Greater(t, low.ThresholdParts.Budget, 0.62)
	require.Equal(t, low.ThresholdParts.Budget, low.Threshold, "the stricter part is the threshold")

	require.Equal(t, 0.25, metricValue(t, ts.url, "triage_slow_share_max"))
	require.Equal(t, low.ThresholdParts.Budget, metricValue(t, ts.url, "triage_decision_budget_threshold"))
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
	require.Equal(t, low.ThresholdParts.Budget, st.SlowPath.BudgetThreshold)
}
