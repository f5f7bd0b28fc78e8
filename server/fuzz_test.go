package server

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/upstream"
)

var fuzzPaths = []string{"/v1/chat/completions", "/v1/completions", "/v1/classify", "/v1/query-process", "/v1/models", "/nope",
	"/v1/messages", "/v1/messages/count_tokens", "/v1/responses"}

// FuzzClientInputLeavesReplicasHealthy sends whatever a client can choose — the forwarded
// User-Agent and the x-session-id header values (bytes HTTP forbids included), the body, the
// endpoint — over a raw connection to a running gateway whose replicas are ejected by the
// first failure counted against them, and requires that no answer is a 5xx and that every
// replica stays healthy: nothing a client sends may count against a replica.
func FuzzClientInputLeavesReplicasHealthy(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add("openai-python/1.0", "session-1", []byte(s), uint8(0))
	}
	for _, s := range agentSeeds {
		f.Add("anthropic-python/1.0", "session-1", []byte(s), uint8(6))
		f.Add("openai-python/1.0", "session-1", []byte(s), uint8(8))
	}
	f.Add("agent\x01", "", []byte(`{"messages":[{"role":"user","content":"hi"}]}`), uint8(0))
	f.Add("a", "s\x7f", []byte(`{"prompt":"p"}`), uint8(1))
	f.Add("a", strings.Repeat("k", 300), []byte(`{"user":"`+strings.Repeat("u", 300)+`","messages":[{"role":"user","content":"x"}]}`), uint8(0))
	f.Add("a", "s", []byte(`{"text":"x"}`), uint8(2))

	ts := startServer(f, func(c *gatewayConfig, _ *testOptions) {
		c.Server.BodyLimit = 4096
		c.Server.MaxTextBytes = 1024
		c.Pools.Fast.PassiveEjection.ConsecutiveFailures = 1
		c.Pools.Slow.PassiveEjection.ConsecutiveFailures = 1
	})
	addr := strings.TrimPrefix(ts.url, "http://")
	f.Fuzz(func(t *testing.T, agent, session string, body []byte, path uint8) {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer c.Close()
		// Under the fuzzing engine's 10 s hang limit, so a request the gateway never answers
		// fails here with its input rather than as a "hung" worker.
		require.NoError(t, c.SetDeadline(time.Now().Add(5*time.Second)))
		method := http.MethodPost
		p := fuzzPaths[int(path)%len(fuzzPaths)]
		if p == "/v1/models" {
			method = http.MethodGet
		}
		fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: x\r\nUser-Agent: %s\r\nX-Session-Id: %s\r\nContent-Type: application/json\r\n"+
			"Content-Length: %d\r\n\r\n", method, p, agent, session, len(body))
		c.Write(body)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			require.Less(t, resp.StatusCode, 500, "client input is never a gateway or replica failure")
		} else {
			// Closing a connection whose request cannot be parsed is an answer; leaving the
			// client waiting is not (fasthttp 1.51 waited for ever on a header folded after a bare LF).
			var ne net.Error
			require.False(t, errors.As(err, &ne) && ne.Timeout(), "the gateway never answered: %v", err)
		}
		for _, pool := range []*upstream.Pool{ts.Server.fast, ts.Server.slow} {
			for _, r := range pool.Replicas() {
				require.Equal(t, upstream.StateHealthy, r.State, "%s/%s", pool.Name(), r.ID)
				require.Zero(t, r.ConsecutiveFailures, "%s/%s", pool.Name(), r.ID)
			}
		}
	})
}

// FuzzRoutingKey: whatever user or session a client sends, the key the policies keep is at
// most maxKeyBytes, the same for the same input, and the input itself when short enough.
func FuzzRoutingKey(f *testing.F) {
	f.Add("")
	f.Add("user-1")
	f.Add(strings.Repeat("x", maxKeyBytes+1))
	f.Fuzz(func(t *testing.T, s string) {
		k := routingKey(s)
		require.LessOrEqual(t, len(k), maxKeyBytes)
		require.Equal(t, k, routingKey(s))
		if len(s) <= maxKeyBytes {
			require.Equal(t, s, k)
		}
	})
}
