package upstream

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/upstream/policy"
)

// A header value HTTP forbids can never be sent to any replica. Before the fix, net/http
// refused it inside RoundTrip, the pool took that for a connection error, retried it on the
// next replica and counted it against both: a handful of such requests ejected the pool.
func TestInvalidHeaderValueIsTheCallersFaultNotTheReplicas(t *testing.T) {
	var hits atomic.Int64
	h := func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"usage":{"completion_tokens":1}}`)
	}
	cfg := testConfig(replicaServer(t, h).URL, replicaServer(t, h).URL)
	cfg.PassiveEjection.ConsecutiveFailures = 1 // the first failure counted would eject
	f := newFixture(t, cfg, policy.NewLeastRequest(), nil)

	for _, v := range []string{"agent\x01", "a\x00b", "line\r\nX-Injected: 1", "del\x7f", "\x1b[31m"} {
		hdr := http.Header{"User-Agent": {v}}
		resp, err := f.pool.Do(context.Background(), &ForwardRequest{
			Method: http.MethodPost, Path: "/v1/chat/completions", Header: hdr, Body: []byte(`{}`),
		})
		require.Nil(t, resp)
		require.ErrorIs(t, err, ErrInvalidRequest, "value %q", v)
		var he *HeaderError
		require.ErrorAs(t, err, &he)
		require.Equal(t, "User-Agent", he.Name)
		var ue *UpstreamError
		require.False(t, errors.As(err, &ue), "not an upstream failure: %v", err)
	}
	require.Zero(t, hits.Load(), "nothing reaches a replica")
	require.True(t, f.pool.Healthy())
	for _, id := range []string{"r0", "r1"} {
		require.Zero(t, f.metric(t, "triage_upstream_ejections_total", map[string]string{"replica": id}))
		require.Zero(t, f.outcomes(t, id, "connect_error"))
		require.Zero(t, f.outcomes(t, id, "retried"))
	}
	require.Zero(t, f.pool.InFlight())

	// The pool still serves a clean request on the first try.
	resp, err := f.pool.Do(context.Background(), &ForwardRequest{
		Method: http.MethodPost, Path: "/v1/chat/completions",
		Header: http.Header{"User-Agent": {"ok/1.0 (tab\tand obs-text \xe9 are allowed)"}}, Body: []byte(`{}`),
	})
	require.NoError(t, err)
	require.False(t, resp.Retried)
	require.NoError(t, resp.Body.Close())
	require.EqualValues(t, 1, hits.Load())
}

// CheckHeader must accept exactly what net/http's client sends: a value it passes that the
// transport then refuses would reach the connect-error branch again.
func TestCheckHeaderAgreesWithNetHTTP(t *testing.T) {
	srv := replicaServer(t, func(w http.ResponseWriter, r *http.Request) {})
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	for b := range 256 {
		v := "a" + string([]byte{byte(b)}) + "b"
		req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
		require.NoError(t, err)
		req.Header["X-Probe"] = []string{v}
		resp, rtErr := tr.RoundTrip(req)
		if rtErr == nil {
			resp.Body.Close()
		}
		ours := CheckHeader("X-Probe", v)
		require.Equal(t, rtErr == nil, ours == nil, "byte 0x%02x: net/http err %v, CheckHeader err %v", b, rtErr, ours)
	}
	require.ErrorIs(t, CheckHeader("Bad Name", "v"), ErrInvalidRequest)
	require.NoError(t, CheckHeader("X-Ok", ""))
}

func TestReplicaHeaderValuesAreValidatedAtLoad(t *testing.T) {
	cfg := testConfig("http://127.0.0.1:1")
	cfg.Replicas[0].Headers = map[string]string{"Authorization": "Bearer k\x01"}
	require.ErrorContains(t, cfg.Validate(), "replicas[0].headers")
}

// FuzzCheckHeader: for any value, CheckHeader accepts it exactly when net/http's client sends
// it, so a forwarded header that passes the gateway's check can never fail in the transport
// (where it would look like the replica's fault).
func FuzzCheckHeader(f *testing.F) {
	for _, s := range []string{"openai-python/1.0", "a\tb", "a\x00b", "x\r\nY: 1", "\x7f", "obs \xe9\xff", ""} {
		f.Add(s)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	f.Cleanup(srv.Close)
	tr := &http.Transport{}
	f.Cleanup(tr.CloseIdleConnections)
	f.Fuzz(func(t *testing.T, v string) {
		req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
		require.NoError(t, err)
		req.Header["X-Probe"] = []string{v}
		resp, rtErr := tr.RoundTrip(req)
		if rtErr == nil {
			resp.Body.Close()
		}
		ours := CheckHeader("X-Probe", v)
		require.Equal(t, rtErr == nil, ours == nil, "value %q: net/http err %v, CheckHeader err %v", v, rtErr, ours)
	})
}
