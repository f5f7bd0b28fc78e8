package upstream

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseUsageShapes(t *testing.T) {
	for _, tc := range []struct {
		name       string
		doc        string
		want       Usage
		full, done bool
	}{
		{"chat", `{"usage":{"prompt_tokens":7,"completion_tokens":3}}`, Usage{7, 3}, true, true},
		{"anthropic body", `{"type":"message","usage":{"input_tokens":5,"output_tokens":4,"cache_read_input_tokens":10,"cache_creation_input_tokens":2}}`, Usage{17, 4}, true, true},
		{"anthropic message_start", `{"type":"message_start","message":{"usage":{"input_tokens":9,"output_tokens":1}}}`, Usage{9, 1}, true, true},
		{"anthropic message_delta", `{"type":"message_delta","delta":{},"usage":{"output_tokens":6}}`, Usage{0, 6}, false, true},
		{"responses body", `{"object":"response","usage":{"input_tokens":12,"output_tokens":8,"total_tokens":20,"input_tokens_details":{"cached_tokens":4}}}`, Usage{12, 8}, true, true},
		{"responses completed", `{"type":"response.completed","response":{"usage":{"input_tokens":3,"output_tokens":2}}}`, Usage{3, 2}, true, true},
		{"responses created", `{"type":"response.created","response":{"usage":null}}`, Usage{}, false, false},
		{"negative", `{"usage":{"input_tokens":-1,"output_tokens":2}}`, Usage{0, 2}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, full, done := parseUsage([]byte(tc.doc))
			require.Equal(t, tc.want, u)
			require.Equal(t, tc.full, full)
			require.Equal(t, tc.done, done)
		})
	}
}

func TestAnthropicStreamUsageIsMerged(t *testing.T) {
	var tc tokenCounter
	tc.init("text/event-stream")
	tc.feed([]byte("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":9,\"output_tokens\":1}}}\n\n" +
		"event: ping\ndata: {\"type\":\"ping\"}\n\n"))
	require.Zero(t, tc.events, "no token yet: the first token (TTFT) is still to come")
	tc.feed([]byte("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"a\"}}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":6}}\n\n"))
	require.Equal(t, 1, tc.events)
	u, ok := tc.reported()
	require.True(t, ok)
	require.Equal(t, Usage{PromptTokens: 9, CompletionTokens: 6}, u)
}

func TestTokenEvents(t *testing.T) {
	for data, want := range map[string]bool{
		`{"id":"c","choices":[{"delta":{"content":"a"}}]}`:                                              true,
		`{"id":"c","choices":[{"delta":{"tool_calls":[{"type":"function","function":{"name":"f"}}]}}]}`: true,
		`{"type":"content_block_delta","delta":{"type":"text_delta","text":"a"}}`:                       true,
		`{"type":"response.output_text.delta","delta":"a"}`:                                             true,
		`{"type":"message_start","message":{}}`:                                                         false,
		`{"type":"ping"}`:                                                                               false,
		`{"type":"response.created","response":{}}`:                                                     false,
		`{"type":"response.completed","response":{}}`:                                                   false,
	} {
		require.Equal(t, want, tokenEvent([]byte(data)), data)
	}
}

func TestValidateAPIs(t *testing.T) {
	c := DefaultPoolConfig()
	c.Name, c.Replicas = "p", []ReplicaConfig{{URL: "http://127.0.0.1:1"}}
	require.NoError(t, c.Validate())
	c.APIs = []string{"messages", "chat", "messages", "gossip"}
	err := c.Validate()
	require.ErrorContains(t, err, `pool.apis[2]: "messages" is given twice`)
	require.ErrorContains(t, err, `pool.apis[3]: unknown API "gossip"`)
	c.APIs = []string{"completions"}
	require.ErrorContains(t, c.Validate(), `pool.apis: must include "chat"`)
}

func TestDoOnSendsToTheNamedReplicaOnly(t *testing.T) {
	hit := make(chan string, 4)
	mk := func(name string) string {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hit <- name
			w.WriteHeader(http.StatusServiceUnavailable) // retryable: DoOn must not retry elsewhere
		}))
		t.Cleanup(s.Close)
		return s.URL
	}
	c := DefaultPoolConfig()
	c.Name = "p"
	c.HealthCheck.Interval, c.ScrapeInterval = 0, 0
	c.Replicas = []ReplicaConfig{{URL: mk("a"), ID: "a"}, {URL: mk("b"), ID: "b"}}
	p, err := New(c, Options{})
	require.NoError(t, err)
	resp, err := p.DoOn(context.Background(), "b", &ForwardRequest{Method: http.MethodGet, Path: "/x"})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, resp.Status)
	require.Equal(t, "b", <-hit)
	require.Len(t, hit, 0, "not retried on the other replica")

	_, err = p.DoOn(context.Background(), "zz", &ForwardRequest{Path: "/x"})
	require.ErrorIs(t, err, ErrUnknownReplica)
	require.NoError(t, p.Drain("b"))
	resp, err = p.DoOn(context.Background(), "b", &ForwardRequest{Path: "/x"})
	require.NoError(t, err, "a draining replica finishes what it holds")
	resp.Body.Close()
	require.True(t, strings.Contains(ErrReplicaUnavailable.Error(), "no healthy replica"))
}

func TestDoOnAnUnreachableReplicaIsUnavailable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	url := "http://" + l.Addr().String()
	require.NoError(t, l.Close()) // nothing listens there now: connection refused
	c := DefaultPoolConfig()
	c.Name = "p"
	c.HealthCheck.Interval, c.ScrapeInterval = 0, 0
	c.Replicas = []ReplicaConfig{{URL: url, ID: "gone"}}
	p, err := New(c, Options{})
	require.NoError(t, err)
	_, err = p.DoOn(context.Background(), "gone", &ForwardRequest{Method: http.MethodGet, Path: "/x"})
	require.ErrorIs(t, err, ErrReplicaUnavailable)
	var ue *UpstreamError
	require.ErrorAs(t, err, &ue, "the failed replica is still named")
	require.Equal(t, "gone", ue.Replica)
}
