package server

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/router"
	"github.com/triage-gw/triage/upstream"
)

// metricValue reads one series ("name{labels}" exactly as exposed) from the gateway's
// /metrics; 0 when absent.
func metricValue(t *testing.T, url, series string) float64 {
	t.Helper()
	_, body := do(t, http.MethodGet, url+"/metrics", "", nil)
	for line := range strings.Lines(string(body)) {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			require.NoError(t, err, line)
			return v
		}
	}
	return 0
}

// sseData returns the data payloads of an SSE body, in order.
func sseData(t *testing.T, body []byte) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, d)
		}
	}
	return out
}

type usageJSON struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
}

// usageOf decodes the usage of a body or chunk; nil when it has none.
func usageOf(t *testing.T, doc string) *usageJSON {
	t.Helper()
	var v struct {
		Usage *usageJSON `json:"usage"`
	}
	require.NoError(t, json.Unmarshal([]byte(doc), &v), doc)
	return v.Usage
}

// TestTokensMatchTheSimulatorsUsage sends each kind of request through the gateway to real
// simulated replicas and checks that what the gateway counts is what the replica reported:
// the non-streaming body's usage (also in the token headers), the usage chunk of a stream
// that asked for it, and, for a stream that did not, the chunk the gateway asked for itself
// and kept from the client.
func TestTokensMatchTheSimulatorsUsage(t *testing.T) {
	cfg := testConfig([]string{simUpstream(t, "sim-fast", "mock-fast")}, []string{simUpstream(t, "sim-slow", "mock-slow")})
	in, out, slowIn, slowOut := 0.15, 0.6, 2.5, 10.0
	cfg.Pools.Fast.Prices = &upstream.Prices{InputPerMillion: &in, OutputPerMillion: &out}
	cfg.Pools.Slow.Prices = &upstream.Prices{InputPerMillion: &slowIn, OutputPerMillion: &slowOut}
	model := newFakeModel("v1")
	_, url, _ := run(t, cfg, testOptions{load: func() (router.Model, error) { return model, nil }})

	tokens := func(pool, kind string) float64 {
		return metricValue(t, url, fmt.Sprintf(`triage_upstream_tokens_total{kind=%q,pool=%q,replica="%s-0"}`, kind, pool, pool))
	}
	var want = map[string]*usageJSON{"fast": {}, "slow": {}}
	add := func(pool string, u *usageJSON) {
		want[pool].PromptTokens += u.PromptTokens
		want[pool].CompletionTokens += u.CompletionTokens
	}

	// Non-streaming: the body's usage, and the same numbers in the headers.
	for _, tc := range []struct{ path, body, pool string }{
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hello there p=0.1"}],"max_tokens":5}`, "fast"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"write an epic poem p=0.9"}],"max_tokens":7}`, "slow"},
		{"/v1/completions", `{"prompt":"once upon a time p=0.95","max_tokens":4}`, "slow"},
	} {
		resp, body := postJSON(t, url+tc.path, tc.body)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		require.Equal(t, tc.pool, resp.Header.Get(HeaderPath))
		u := usageOf(t, string(body))
		require.NotNil(t, u, "the simulator reports usage")
		require.Positive(t, u.PromptTokens)
		require.Equal(t, strconv.Itoa(u.PromptTokens), resp.Header.Get(HeaderPromptTokens))
		require.Equal(t, strconv.Itoa(u.CompletionTokens), resp.Header.Get(HeaderCompletionTokens))
		add(tc.pool, u)
	}

	// A stream that asked for usage gets its usage chunk, last before [DONE].
	resp, body := postJSON(t, url+"/v1/chat/completions",
		`{"messages":[{"role":"user","content":"stream this p=0.1"}],"max_tokens":6,"stream":true,"stream_options":{"include_usage":true}}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Empty(t, resp.Header.Get(HeaderPromptTokens), "a stream's headers go before its usage exists")
	data := sseData(t, body)
	require.Equal(t, "[DONE]", data[len(data)-1])
	u := usageOf(t, data[len(data)-2])
	require.NotNil(t, u, "the client asked for the usage chunk: %s", body)
	require.Equal(t, 6, u.CompletionTokens)
	require.Len(t, data, 6+2, "six token chunks, the usage chunk, [DONE]")
	add("fast", u)

	// A stream that did not ask: no usage chunk reaches the client, and its tokens are
	// still counted (the gateway asked the replica).
	before := tokens("slow", "completion")
	resp, body = postJSON(t, url+"/v1/completions",
		`{"prompt":"a long story p=0.9","max_tokens":5,"stream":true}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	data = sseData(t, body)
	require.Len(t, data, 5+1, "five token chunks and [DONE], no usage chunk: %s", body)
	for _, d := range data[:5] {
		require.Nil(t, usageOf(t, d))
	}
	require.Equal(t, before+5, tokens("slow", "completion"))
	prompt := tokens("slow", "prompt") - float64(want["slow"].PromptTokens)
	require.Positive(t, prompt, "the stream's prompt tokens are counted")
	want["slow"].PromptTokens += int(prompt)
	want["slow"].CompletionTokens += 5

	for pool, u := range want {
		require.Equal(t, float64(u.PromptTokens), tokens(pool, "prompt"), pool)
		require.Equal(t, float64(u.CompletionTokens), tokens(pool, "completion"), pool)
		require.Zero(t, metricValue(t, url, fmt.Sprintf(`triage_upstream_unmetered_total{pool=%q,replica="%s-0"}`, pool, pool)))
	}
	cost := func(u *usageJSON, in, out float64) float64 {
		return (float64(u.PromptTokens)*in + float64(u.CompletionTokens)*out) / 1e6
	}
	for _, tc := range []struct {
		pool      string
		in, out   float64
		baseline  float64
		costTotal string
	}{
		{"fast", in, out, cost(want["fast"], slowIn, slowOut), `triage_upstream_cost_total{pool="fast"}`},
		{"slow", slowIn, slowOut, cost(want["slow"], slowIn, slowOut), `triage_upstream_cost_total{pool="slow"}`},
	} {
		require.InDelta(t, cost(want[tc.pool], tc.in, tc.out), metricValue(t, url, tc.costTotal), 1e-12, tc.pool)
		require.InDelta(t, tc.baseline, metricValue(t, url, fmt.Sprintf(`triage_upstream_cost_baseline_total{pool=%q}`, tc.pool)), 1e-12, tc.pool)
	}
}

// TestStreamUsageRequestAndStrip checks what the replica is sent and what the client gets
// for each combination of the client's stream_options and the pool's ask_stream_usage.
func TestStreamUsageRequestAndStrip(t *testing.T) {
	tests := []struct {
		name          string
		options       string // the request's stream_options member, "" for none
		ask           bool   // pools.fast.ask_stream_usage
		wantSent      map[string]any
		wantUsage     bool // the client sees the usage chunk
		wantUnmetered float64
	}{
		{"client asks", `"stream_options":{"include_usage":true},`, true, map[string]any{"include_usage": true}, true, 0},
		{"client silent", ``, true, map[string]any{"include_usage": true}, false, 0},
		{"client says no, other options kept", `"stream_options":{"include_usage":false,"x_extra":1},`, true,
			map[string]any{"include_usage": true, "x_extra": 1.0}, false, 0},
		{"null options", `"stream_options":null,`, true, map[string]any{"include_usage": true}, false, 0},
		{"pool does not ask", ``, false, nil, false, 1},
		{"pool does not ask, client does", `"stream_options":{"include_usage":true},`, false, map[string]any{"include_usage": true}, true, 0},
		{"options the replica must refuse are left alone", `"stream_options":"yes",`, true, nil, false, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := startServer(t, func(c *gatewayConfig, _ *testOptions) { c.Pools.Fast.AskStreamUsage = tt.ask })
			ts.fast.onGenerate = func(w http.ResponseWriter, r *http.Request, body []byte) {
				var req struct {
					StreamOptions struct {
						IncludeUsage bool `json:"include_usage"`
					} `json:"stream_options"`
				}
				_ = json.Unmarshal(body, &req)
				w.Header().Set("Content-Type", "text/event-stream")
				io.WriteString(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\r\n\r\n")
				if req.StreamOptions.IncludeUsage {
					io.WriteString(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":1,\"total_tokens\":8}}\r\n\r\n")
				}
				io.WriteString(w, "data: [DONE]\r\n\r\n")
			}
			resp, body := postJSON(t, ts.url+"/v1/chat/completions",
				`{"messages":[{"role":"user","content":"hi"}],`+tt.options+`"stream":true}`)
			require.Equal(t, http.StatusOK, resp.StatusCode, string(body))

			sent := ts.fast.requests()[0].body["stream_options"]
			if tt.wantSent == nil {
				require.NotEqual(t, map[string]any{"include_usage": true}, sent)
			} else {
				require.Equal(t, tt.wantSent, sent)
			}
			require.Equal(t, tt.wantUsage, strings.Contains(string(body), `"usage"`), string(body))
			require.True(t, strings.HasSuffix(string(body), "data: [DONE]\r\n\r\n"), string(body))
			if !tt.wantUsage && tt.wantUnmetered == 0 {
				require.Equal(t, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\r\n\r\ndata: [DONE]\r\n\r\n", string(body),
					"the stream the client asked for, byte for byte")
			}
			require.Equal(t, tt.wantUnmetered, metricValue(t, ts.url, `triage_upstream_unmetered_total{pool="fast",replica="fast-0"}`))
			if tt.wantUnmetered == 0 {
				require.Equal(t, 7.0, metricValue(t, ts.url, `triage_upstream_tokens_total{kind="prompt",pool="fast",replica="fast-0"}`))
			}
		})
	}
}

// TestNonStreamingAnswerCutBeforeItsEnd: the body is read before the headers go out, so a
// replica that breaks off a non-streaming answer is answered 502 in the OpenAI error shape
// instead of a cut body.
func TestNonStreamingAnswerCutBeforeItsEnd(t *testing.T) {
	ts := startServer(t)
	ts.fast.onGenerate = func(w http.ResponseWriter, r *http.Request, body []byte) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", "1000")
		io.WriteString(w, `{"choices":[`)
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}
	resp, body := postJSON(t, ts.url+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusBadGateway, resp.StatusCode, string(body))
	require.Equal(t, "fast-0", resp.Header.Get(HeaderReplica))
	apiErr(t, body)
	require.Equal(t, 1.0, metricValue(t, ts.url, `triage_upstream_requests_total{outcome="stream_error",pool="fast",replica="fast-0"}`))
}

// TestNoTokenHeadersWithoutUsage: an answer without a usage object has no token headers,
// and counts as unmetered.
func TestNoTokenHeadersWithoutUsage(t *testing.T) {
	ts := startServer(t)
	ts.fast.onGenerate = func(w http.ResponseWriter, r *http.Request, body []byte) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"choices":[{"index":0,"message":{"role":"assistant","content":"ok"}}]}`)
	}
	resp, body := postJSON(t, ts.url+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Empty(t, resp.Header.Get(HeaderPromptTokens))
	require.Empty(t, resp.Header.Get(HeaderCompletionTokens))
	require.Equal(t, 1.0, metricValue(t, ts.url, `triage_upstream_unmetered_total{pool="fast",replica="fast-0"}`))
}

func TestSSEFramerDropsTheUsageChunk(t *testing.T) {
	usage := "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}"
	for _, nl := range []string{"\n", "\r\n", "\r"} {
		ev := func(s string) string { return s + nl + nl }
		kept := ev(`data: {"choices":[{"delta":{"content":"a"}}]}`) + ev(`: keep-alive`) + ev(`data: {"choices":[{"delta":{}}],"usage":{"prompt_tokens":3}}`)
		in := kept + ev(usage) + ev("data: [DONE]")
		want := kept + ev("data: [DONE]")
		for _, sizes := range [][]int{nil, {1}, {2}, {3, 1, 7, 2, 100}, {len(kept) + 4}} {
			var sz []int
			if len(sizes) == 1 && sizes[0] < 4 {
				for range len(in) {
					sz = append(sz, sizes[0])
				}
			} else {
				sz = append(sz, sizes...)
			}
			f := newSSEFramer(&chunkReader{data: []byte(in), sizes: sz, end: io.EOF}, breakEvent)
			f.drop = usageChunkEvent
			out, err := io.ReadAll(f)
			require.NoError(t, err)
			require.Equal(t, want, string(out), "newline %q sizes %v", nl, sizes)
		}
	}
}
