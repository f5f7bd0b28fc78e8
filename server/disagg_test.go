package server

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/router"
	"github.com/triage-gw/triage/sim"
	"github.com/triage-gw/triage/upstream"
)

// pdSim serves a sim replica with no delays and the given KV role.
func pdSim(t *testing.T, name, role string) string {
	t.Helper()
	c := sim.FastPreset()
	c.Name, c.Model, c.Role = name, "model-fast", role
	c.TTFTBase, c.PrefillPerToken, c.DecodePerToken, c.Jitter = 0, 0, 0, 0
	s, err := sim.New(c, sim.Options{})
	require.NoError(t, err)
	hs := httptest.NewServer(s)
	t.Cleanup(hs.Close)
	return hs.URL
}

// A disaggregated pool's answer names both replicas and times both legs; a request that ran
// whole says why.
func TestDisaggregatedHeaders(t *testing.T) {
	prefill := pdSim(t, "p", sim.RolePrefill)
	cfg := testConfig([]string{prefill, pdSim(t, "d", sim.RoleDecode)}, []string{simUpstream(t, "slow", "model-slow")})
	cfg.Pools.Fast.Replicas[0].Role = upstream.RolePrefill
	cfg.Pools.Fast.Replicas[1].Role = upstream.RoleDecode
	cfg.Pools.Fast.Policy.Trace.Enabled = true
	model := newFakeModel("v1")
	s, url, stop := run(t, cfg, testOptions{load: func() (router.Model, error) { return model, nil }})
	t.Cleanup(func() { stop() })

	for _, stream := range []string{"false", "true"} {
		resp, body := postJSON(t, url+"/v1/chat/completions",
			`{"model":"model-fast","stream":`+stream+`,"messages":[{"role":"user","content":"hello there"}]}`)
		require.Equal(t, 200, resp.StatusCode, string(body))
		require.Equal(t, "fast-1", resp.Header.Get(HeaderReplica))
		require.Equal(t, "fast-0", resp.Header.Get(HeaderPrefillReplica))
		require.Empty(t, resp.Header.Get(HeaderPDFallback))
		st := resp.Header.Get("Server-Timing")
		require.Contains(t, st, `prefill;desc="fast-0";dur=`)
		require.Contains(t, st, `decode;desc="fast-1";dur=`)
		require.NotEmpty(t, resp.Header.Get(sim.HeaderKVTransferTokens), "the decode replica decoded from transferred KV")
		require.True(t, strings.Contains(string(body), "choices"), string(body))
	}

	// The decision trace carries both legs' picks.
	resp, body := do(t, "GET", url+"/admin/trace?pool=fast", "", nil, "Authorization", "Bearer "+testToken)
	require.Equal(t, 200, resp.StatusCode, string(body))
	var tr struct {
		Prefill, Decode struct {
			Policy  string
			Records []struct{ Chosen struct{ ID string } }
		}
	}
	require.NoError(t, json.Unmarshal(body, &tr))
	require.Equal(t, "prefix-cache", tr.Prefill.Policy)
	require.Equal(t, "least-request", tr.Decode.Policy)
	require.Len(t, tr.Prefill.Records, 2)
	require.Len(t, tr.Decode.Records, 2)
	require.Equal(t, "fast-0", tr.Prefill.Records[0].Chosen.ID)
	require.Equal(t, "fast-1", tr.Decode.Records[0].Chosen.ID)

	// With the prefill replica drained, the request runs whole on the decode replica.
	require.NoError(t, s.router.Fast().Drain("fast-0"))
	resp, body = postJSON(t, url+"/v1/chat/completions", `{"model":"model-fast","messages":[{"role":"user","content":"hello"}]}`)
	require.Equal(t, 200, resp.StatusCode, string(body))
	require.Equal(t, "fast-1", resp.Header.Get(HeaderReplica))
	require.Equal(t, string(upstream.FallbackNoPrefillReplica), resp.Header.Get(HeaderPDFallback))
	require.Empty(t, resp.Header.Get(HeaderPrefillReplica))
}
