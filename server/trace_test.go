package server

import (
	"encoding/json"
	"net/http"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// traceOn enables decision tracing on the fast pool with a ring of capacity records and
// gives it two replicas on the same fake upstream, picked round-robin: unlike least-request,
// whose picks depend on whether the previous response has been accounted for yet, its
// turns are fixed.
func traceOn(capacity int) serverOption {
	return func(c *gatewayConfig, _ *testOptions) {
		c.Pools.Fast.Policy.Name = "round-robin"
		c.Pools.Fast.Policy.Trace.Enabled = true
		c.Pools.Fast.Policy.Trace.Capacity = capacity
		r := c.Pools.Fast.Replicas[0]
		r.ID = "fast-1"
		c.Pools.Fast.Replicas = append(c.Pools.Fast.Replicas, r)
	}
}

type traceBody struct {
	Path     string `json:"path"`
	Pool     string `json:"pool"`
	Policy   string `json:"policy"`
	Capacity int    `json:"capacity"`
	Records  []struct {
		Seq           uint64 `json:"seq"`
		LowerIsBetter bool   `json:"lower_is_better"`
		Chosen        struct {
			ID    string  `json:"id"`
			Score float64 `json:"score"`
		} `json:"chosen"`
		Top []struct {
			ID string `json:"id"`
		} `json:"top"`
	} `json:"records"`
}

func getTrace(t *testing.T, ts *testServer, query string) (*http.Response, []byte) {
	t.Helper()
	return do(t, http.MethodGet, ts.url+"/admin/trace"+query, "", nil, "Authorization", "Bearer "+testToken)
}

func TestAdminTraceReturnsTheLatestDecisions(t *testing.T) {
	ts := startServer(t, traceOn(4))

	resp, body := getTrace(t, ts, "?pool=fast")
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.JSONEq(t, `{"path":"fast","pool":"fast","policy":"round-robin","capacity":4,"records":[]}`, string(body),
		"before any request: an empty list, not null")

	for i := range 5 {
		resp, body := postJSON(t, ts.url+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hello `+strconv.Itoa(i)+`"}]}`)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		require.Equal(t, "fast", resp.Header.Get(HeaderPath))
	}

	resp, body = getTrace(t, ts, "?pool=fast")
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	var tb traceBody
	require.NoError(t, json.Unmarshal(body, &tb))
	require.Equal(t, 4, tb.Capacity)
	require.Len(t, tb.Records, 4, "the default limit is capped by the capacity: the ring keeps the last 4 of 5")
	for i, r := range tb.Records {
		require.Equal(t, uint64(i+2), r.Seq, "oldest first")
		require.True(t, r.LowerIsBetter, "round-robin is traced by in-flight, lower is better")
		require.Len(t, r.Top, 2)
	}
	require.Equal(t, []string{"fast-1", "fast-0"}, []string{tb.Records[0].Chosen.ID, tb.Records[1].Chosen.ID},
		"the replicas take turns")

	resp, body = getTrace(t, ts, "?pool=fast&limit=1")
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.NoError(t, json.Unmarshal(body, &tb))
	require.Len(t, tb.Records, 1)
	require.Equal(t, uint64(5), tb.Records[0].Seq, "limit keeps the latest")

	resp, _ = getTrace(t, ts, "?pool=fast&limit=4")
	require.Equal(t, http.StatusOK, resp.StatusCode, "the capacity itself is allowed")
}

func TestAdminTraceErrors(t *testing.T) {
	ts := startServer(t, traceOn(8))
	for _, tc := range []struct {
		query      string
		status     int
		code, want string
	}{
		{"", http.StatusBadRequest, "missing_field", "pool: required"},
		{"?pool=medium", http.StatusNotFound, "unknown_pool", `pool: must be "fast" or "slow", got "medium"`},
		{"?pool=slow", http.StatusConflict, "trace_disabled", "set pools.slow.policy.trace.enabled: true"},
		{"?pool=fast&limit=0", http.StatusBadRequest, "invalid_limit", `limit: must be an integer in [1, 8] (pools.fast.policy.trace.capacity), got "0"`},
		{"?pool=fast&limit=9", http.StatusBadRequest, "invalid_limit", "got \"9\""},
		{"?pool=fast&limit=ten", http.StatusBadRequest, "invalid_limit", "got \"ten\""},
	} {
		t.Run(tc.query, func(t *testing.T) {
			resp, body := getTrace(t, ts, tc.query)
			require.Equal(t, tc.status, resp.StatusCode, string(body))
			e := apiErr(t, body)
			require.Equal(t, tc.code, *e.Code)
			require.Contains(t, e.Message, tc.want)
		})
	}

	resp, body := do(t, http.MethodGet, ts.url+"/admin/trace?pool=fast", "", nil)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "behind the admin token like the other admin endpoints")
	require.Equal(t, "authentication_error", apiErr(t, body).Type)

	ts = startServer(t, func(c *gatewayConfig, _ *testOptions) { c.Admin.Token = "" })
	resp, _ = do(t, http.MethodGet, ts.url+"/admin/trace?pool=fast", "", nil)
	require.Equal(t, http.StatusNotFound, resp.StatusCode, "no admin token, no admin endpoints")
}
