package upstream

import (
	"context"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

func TestTokenCounterReadsStreamUsage(t *testing.T) {
	tests := []struct {
		name       string
		stream     string
		want       Usage
		metered    bool
		outputWant int // count(): the picker's output tokens
	}{
		{
			name: "usage chunk before [DONE]",
			stream: "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n" +
				"data: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\n" +
				"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":11,\"completion_tokens\":2,\"total_tokens\":13}}\n\n" +
				"data: [DONE]\n\n",
			want: Usage{PromptTokens: 11, CompletionTokens: 2}, metered: true, outputWant: 2,
		},
		{
			name: "CRLF lines and usage null in every token chunk (OpenAI)",
			stream: "data: {\"choices\":[{\"delta\":{}}],\"usage\":null}\r\n\r\n" +
				"data:{\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":1}}\r\n\r\n" +
				"data: [DONE]\r\n\r\n",
			want: Usage{PromptTokens: 4, CompletionTokens: 1}, metered: true, outputWant: 1,
		},
		{
			name: "running totals in every chunk: the last wins",
			stream: "data: {\"choices\":[{}],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":1}}\n\n" +
				"data: {\"choices\":[{}],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":2}}\n\n" +
				"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":3}}\n\n",
			want: Usage{PromptTokens: 4, CompletionTokens: 3}, metered: true, outputWant: 3,
		},
		{
			name: "no usage: chunks counted, nothing metered",
			stream: "data: {\"choices\":[{}]}\n\n" +
				"data: {\"choices\":[{}]}\n\n" +
				"data: [DONE]\n\n",
			outputWant: 2,
		},
		{
			name:       "usage in a comment or another field is not usage",
			stream:     ": \"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}\n\ndata: {\"x\":{\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}}\n\n",
			outputWant: 1,
		},
		{
			name:       "a data line over the cap is not parsed",
			stream:     "data: {\"pad\":\"" + strings.Repeat("x", maxUsageLine) + "\",\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}\n\n",
			outputWant: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, chunk := range []int{1, 2, 5, 13, len(tt.stream)} {
				var tc tokenCounter
				tc.init("text/event-stream")
				for i := 0; i < len(tt.stream); i += chunk {
					tc.feed([]byte(tt.stream[i:min(i+chunk, len(tt.stream))]))
				}
				u, ok := tc.reported()
				require.Equal(t, tt.metered, ok, "chunk size %d", chunk)
				require.Equal(t, tt.want, u, "chunk size %d", chunk)
				require.Equal(t, tt.outputWant, tc.count(), "chunk size %d", chunk)
			}
		})
	}
}

func TestTokenCounterReadsJSONUsage(t *testing.T) {
	var tc tokenCounter
	tc.init("application/json")
	tc.feed([]byte(`{"choices":[],"usage":{"prompt_tokens":`))
	tc.feed([]byte(`9,"completion_tokens":12}}`))
	u, ok := tc.reported()
	require.True(t, ok)
	require.Equal(t, Usage{PromptTokens: 9, CompletionTokens: 12}, u)

	var partial tokenCounter
	partial.init("application/json")
	partial.feed([]byte(`{"usage":{"completion_tokens":3}}`))
	_, ok = partial.reported()
	require.False(t, ok, "a usage object without prompt_tokens is not counted or priced")
	require.Equal(t, 3, partial.count(), "but the picker still gets the output count")

	var negative tokenCounter
	negative.init("application/json")
	negative.feed([]byte(`{"usage":{"prompt_tokens":-1,"completion_tokens":3}}`))
	_, ok = negative.reported()
	require.False(t, ok)
}

func TestIsUsageChunk(t *testing.T) {
	for data, want := range map[string]bool{
		`{"id":"c","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2}}`: true,
		`{"choices": [ ], "usage": {"prompt_tokens":1}}`:                            true,
		`{"choices":[{"delta":{}}],"usage":{"prompt_tokens":1}}`:                    false, // a token chunk with running usage
		`{"choices":[],"usage":null}`:                                               false,
		`{"usage":{"prompt_tokens":1}}`:                                             false, // no choices at all
		`{"choices":[{"delta":{"content":"usage"}}]}`:                               false,
		`[DONE]`: false,
		`{"choices":[],"usage":{"prompt_tokens":1}`: false, // broken JSON
	} {
		require.Equal(t, want, IsUsageChunk([]byte(data)), data)
	}
}

func TestPricesValidateAt(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	tests := []struct {
		name   string
		prices Prices
		want   []string
	}{
		{"valid", Prices{InputPerMillion: f(0.15), OutputPerMillion: f(0.6)}, nil},
		{"free", Prices{InputPerMillion: f(0), OutputPerMillion: f(0)}, nil},
		{"input missing", Prices{OutputPerMillion: f(1)}, []string{"pools.fast.prices.input_per_million: required"}},
		{"both missing", Prices{}, []string{"pools.fast.prices.input_per_million: required", "pools.fast.prices.output_per_million: required"}},
		{"negative", Prices{InputPerMillion: f(1), OutputPerMillion: f(-2)}, []string{"pools.fast.prices.output_per_million: must be a finite number >= 0, got -2"}},
		{"NaN", Prices{InputPerMillion: f(math.NaN()), OutputPerMillion: f(1)}, []string{"pools.fast.prices.input_per_million: must be a finite number >= 0, got NaN"}},
		{"infinite", Prices{InputPerMillion: f(math.Inf(1)), OutputPerMillion: f(1)}, []string{"pools.fast.prices.input_per_million"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.prices.ValidateAt("pools.fast.prices")
			if tt.want == nil {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			for _, w := range tt.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}

	cfg := validPoolConfig()
	cfg.Prices = &Prices{InputPerMillion: f(-1)}
	err := cfg.ValidateAt("pools.slow")
	require.ErrorContains(t, err, "pools.slow.prices.input_per_million: must be a finite number >= 0, got -1")
	require.ErrorContains(t, err, "pools.slow.prices.output_per_million: required")

	_, err = New(testConfig("http://127.0.0.1:1"), Options{BaselinePrices: &Prices{InputPerMillion: f(1)}})
	require.ErrorContains(t, err, "baseline prices.output_per_million: required")
}

func TestPricesCost(t *testing.T) {
	in, out := 2.5, 10.0
	p := Prices{InputPerMillion: &in, OutputPerMillion: &out}
	require.InDelta(t, 0.0025+0.01, p.Cost(Usage{PromptTokens: 1000, CompletionTokens: 1000}), 1e-12)
	require.Zero(t, p.Cost(Usage{}))
}

// TestPoolCountsTokensAndCost sends answers of every kind through a pool and
// reads the token, cost and unmetered counters.
func TestPoolCountsTokensAndCost(t *testing.T) {
	srv := replicaServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Query().Get("kind") {
		case "json":
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":100,"completion_tokens":20}}`)
		case "sse-usage":
			sseHeaders(w)
			flushEvent(w, `{"choices":[{"delta":{"content":"a"}}]}`)
			flushEvent(w, `{"choices":[],"usage":{"prompt_tokens":50,"completion_tokens":1}}`)
			flushEvent(w, `[DONE]`)
		case "sse-bare":
			sseHeaders(w)
			flushEvent(w, `{"choices":[{"delta":{"content":"a"}}]}`)
			flushEvent(w, `[DONE]`)
		case "error":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"error":{"message":"no"}}`)
		}
	})
	cfg := testConfig(srv.URL)
	f := func(v float64) *float64 { return &v }
	cfg.Prices = &Prices{InputPerMillion: f(0.1), OutputPerMillion: f(0.4)}
	reg := prometheus.NewRegistry()
	pool, err := New(cfg, Options{
		Logger:         slog.New(slog.DiscardHandler),
		Registerer:     reg,
		BaselinePrices: &Prices{InputPerMillion: f(2), OutputPerMillion: f(8)},
	})
	require.NoError(t, err)
	fx := &poolFixture{pool: pool, reg: reg}

	// Created at New, before any traffic, so dashboards see them at 0.
	for _, name := range []string{"triage_upstream_cost_total", "triage_upstream_cost_baseline_total"} {
		require.Equal(t, 1, countSeries(t, reg, name, map[string]string{"pool": "test"}), name)
	}
	require.Equal(t, 2, countSeries(t, reg, "triage_upstream_tokens_total", map[string]string{"pool": "test", "replica": "r0"}))

	send := func(kind string) *Response {
		resp, err := pool.Do(context.Background(), &ForwardRequest{Method: http.MethodPost, Path: "/v1/chat/completions?kind=" + kind, Body: []byte(`{}`)})
		require.NoError(t, err)
		_, err = io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		return resp
	}
	u, ok := send("json").Usage()
	require.True(t, ok)
	require.Equal(t, Usage{PromptTokens: 100, CompletionTokens: 20}, u)
	u, ok = send("sse-usage").Usage()
	require.True(t, ok)
	require.Equal(t, Usage{PromptTokens: 50, CompletionTokens: 1}, u)
	_, ok = send("sse-bare").Usage()
	require.False(t, ok)
	_, ok = send("error").Usage()
	require.False(t, ok)

	tokens := func(kind string) float64 {
		return fx.metric(t, "triage_upstream_tokens_total", map[string]string{"pool": "test", "replica": "r0", "kind": kind})
	}
	require.Equal(t, 150.0, tokens("prompt"))
	require.Equal(t, 21.0, tokens("completion"))
	require.Equal(t, 1.0, fx.metric(t, "triage_upstream_unmetered_total", map[string]string{"replica": "r0"}),
		"the stream without usage; the 400 ran no model")
	require.InDelta(t, (150*0.1+21*0.4)/1e6, fx.metric(t, "triage_upstream_cost_total", map[string]string{"pool": "test"}), 1e-15)
	require.InDelta(t, (150*2+21*8)/1e6, fx.metric(t, "triage_upstream_cost_baseline_total", map[string]string{"pool": "test"}), 1e-15)
}

func TestPoolWithoutPricesHasNoCostSeries(t *testing.T) {
	fx := newFixture(t, testConfig("http://127.0.0.1:1"), nil, nil)
	for _, name := range []string{"triage_upstream_cost_total", "triage_upstream_cost_baseline_total"} {
		require.Zero(t, countSeries(t, fx.reg, name, nil), name)
	}
}

// countSeries counts the series of family name whose labels include want.
func countSeries(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) int {
	t.Helper()
	return len(matchingSeries(t, reg, name, want))
}
