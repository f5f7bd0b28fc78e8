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
