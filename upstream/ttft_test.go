package upstream

import (
	"context"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/upstream/policy"
)

// ttftPicker is a stubPicker that records ObserveTTFT calls.
type ttftPicker struct {
	stubPicker
	mu  sync.Mutex
	obs []ttftCall
}

type ttftCall struct {
	replica  string
	inFlight int
	ttft     time.Duration
}

func (p *ttftPicker) ObserveTTFT(_ *policy.Request, id string, inFlight int, ttft time.Duration) {
	p.mu.Lock()
	p.obs = append(p.obs, ttftCall{id, inFlight, ttft})
	p.mu.Unlock()
}

func (p *ttftPicker) calls() []ttftCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]ttftCall(nil), p.obs...)
}

func TestPoolObservesTTFTOfStreams(t *testing.T) {
	const firstTokenDelay = 30 * time.Millisecond
	sse := replicaServer(t, func(w http.ResponseWriter, r *http.Request) {
		sseHeaders(w) // headers at once, as vLLM sends them: TTFB is not TTFT
		time.Sleep(firstTokenDelay)
		flushEvent(w, `{"choices":[{"delta":{"content":"Hel"}}]}`)
		flushEvent(w, `{"choices":[{"delta":{"content":"lo"}}]}`)
		flushEvent(w, "[DONE]")
	})
	tests := []struct {
		name    string
		handler http.HandlerFunc
		want    int
	}{
		{"stream: once, at the first event", sse.Config.Handler.ServeHTTP, 1},
		{"JSON answer: not observed", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"choices":[]}`)
		}, 0},
		{"error status: not observed", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, "data: {}\n\n")
		}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := replicaServer(t, tt.handler)
			p := &ttftPicker{}
			f := newFixture(t, testConfig(srv.URL), p, nil)
			f.pool.replicas[0].inFlight.Store(3) // others' requests: the load the pick met
			resp, err := f.pool.Do(context.Background(), &ForwardRequest{Method: "POST", Path: "/v1/chat/completions", Body: []byte(`{"stream":true}`)})
			require.NoError(t, err)
			_, err = io.Copy(io.Discard, resp.Body)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			got := p.calls()
			require.Len(t, got, tt.want)
			if tt.want == 1 {
				require.Equal(t, "r0", got[0].replica)
				require.Equal(t, 3, got[0].inFlight)
				require.GreaterOrEqual(t, got[0].ttft, firstTokenDelay)
			}
		})
	}
}

// Streamed answers' TTFT lands in triage_upstream_ttft_seconds, and the ones with a target
// (the request's own, else the pool's slo.ttft_target) count as met or missed, whatever the
// policy: an operator compares attainment across policies on the same metric.
func TestPoolCountsTTFTAgainstTheTarget(t *testing.T) {
	const firstTokenDelay = 30 * time.Millisecond
	srv := replicaServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/json" {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"choices":[]}`)
			return
		}
		sseHeaders(w)
		time.Sleep(firstTokenDelay)
		flushEvent(w, `{"choices":[{"delta":{"content":"Hi"}}]}`)
		flushEvent(w, "[DONE]")
	})
	cfg := testConfig(srv.URL)
	slo := policy.SectionOf[policy.SLOConfig](cfg.Policy, "slo")
	slo.TTFTTarget = 10 * time.Millisecond // the pool's default: every stream here misses it
	require.NoError(t, cfg.Policy.SetSection("slo", slo))
	f := newFixture(t, cfg, &stubPicker{}, nil)
	send := func(path string, target time.Duration) {
		resp, err := f.pool.Do(context.Background(), &ForwardRequest{Method: "POST", Path: path, Body: []byte(`{"stream":true}`),
			Routing: policy.Request{TTFTTarget: target}})
		require.NoError(t, err)
		_, err = io.Copy(io.Discard, resp.Body)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
	}
	send("/v1/chat/completions", 0)           // the pool's 10 ms: missed
	send("/v1/chat/completions", time.Second) // its own 1 s: met
	send("/v1/chat/completions", time.Second) // met
	send("/v1/json", time.Second)             // no first token to see: not counted
	slo0 := func(outcome string) float64 {
		return f.metric(t, "triage_upstream_slo_total", map[string]string{"pool": "test", "outcome": outcome})
	}
	require.Equal(t, 2.0, slo0("met"))
	require.Equal(t, 1.0, slo0("missed"))
	require.Equal(t, 3.0, f.metric(t, "triage_upstream_ttft_seconds", map[string]string{"pool": "test", "replica": "r0"}),
		"one sample per streamed answer")
}
