package server

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/upstream/policy"
)

// The x-slo-ttft-ms header sets the request's TTFT target for the SLO policies: the fast
// pool's trace says which branch decided (no target, or a target some replica is predicted
// to meet), a bad value is a 400 naming the header, and the header never reaches a replica.
func TestSLOTTFTHeader(t *testing.T) {
	sloPolicy := func(c *gatewayConfig, _ *testOptions) {
		c.Pools.Fast.Policy.Name = "slo-least-load"
		c.Pools.Fast.Policy.Trace.Enabled = true
	}
	ts := startServer(t, sloPolicy)
	chat := `{"messages":[{"role":"user","content":"hello p=0.1"}]}`
	lastNote := func() string {
		t.Helper()
		resp, body := getTrace(t, ts, "?pool=fast&limit=1")
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		var tb struct {
			Records []policy.TraceRecord `json:"records"`
		}
		require.NoError(t, json.Unmarshal(body, &tb))
		require.Len(t, tb.Records, 1)
		return tb.Records[0].Note
	}

	resp, body := postJSON(t, ts.url+"/v1/chat/completions", chat)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Equal(t, "slo-no-target", lastNote(), "absent: the pool's default target, none here")

	resp, body = postJSON(t, ts.url+"/v1/chat/completions", chat, HeaderSLOTTFT, "250")
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Equal(t, "slo-met", lastNote(), "an unmeasured replica is predicted to meet 250ms")
	for _, r := range ts.fast.requests() {
		require.Empty(t, r.header.Get(HeaderSLOTTFT), "the gateway's own header is not forwarded")
	}

	for _, bad := range []string{"abc", "0", "-5", "1.5", "600001", "99999999999999999999"} {
		resp, body := postJSON(t, ts.url+"/v1/chat/completions", chat, HeaderSLOTTFT, bad)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s: %s", bad, body)
		e := apiErr(t, body)
		require.Equal(t, "invalid_header", *e.Code, bad)
		require.Equal(t, HeaderSLOTTFT, *e.Param, bad)
		require.Contains(t, e.Message, HeaderSLOTTFT, bad)
	}
}
