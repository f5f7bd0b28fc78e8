package drills

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/triage-gw/triage/bench/load"
	"github.com/triage-gw/triage/bench/sse"
	"github.com/triage-gw/triage/cmd/triage-bench/internal/sweep"
	"github.com/triage-gw/triage/router"
	"github.com/triage-gw/triage/server"
)

// balancer spreads requests round-robin over the gateways as a load balancer in front of
// them would. A request whose connection fails before any response byte (refused, or reset
// by a gateway that died) is sent again to the next gateway, as Envoy's retry_on
// "connect-failure,reset" does; a gateway that refuses new connections leaves the rotation.
// Nothing is retried once an answer has started.
type balancer struct {
	urls     []string
	addrs    []string
	next     atomic.Uint64
	down     []atomic.Bool
	rerouted atomic.Int64
}

func newBalancer(set *fleetGateways) *balancer {
	b := &balancer{urls: set.urls(""), down: make([]atomic.Bool, len(set.gws))}
	for _, u := range b.urls {
		pu, _ := url.Parse(u)
		b.addrs = append(b.addrs, pu.Host)
	}
	return b
}

// pick returns the next gateway in the rotation, -1 when every one is down.
func (b *balancer) pick() int {
	for range len(b.urls) {
		i := int((b.next.Add(1) - 1) % uint64(len(b.urls)))
		if !b.down[i].Load() {
			return i
		}
	}
	return -1
}

// failed handles a connection failure on gateway i: it leaves the rotation if it no longer
// accepts connections.
func (b *balancer) failed(i int) {
	b.rerouted.Add(1)
	c, err := net.DialTimeout("tcp", b.addrs[i], 200*time.Millisecond)
	if err != nil {
		b.down[i].Store(true)
		return
	}
	c.Close()
}

// answer is one request as the client saw it.
type answer struct {
	status    int
	streaming bool // it failed after the answer had started (a cut stream)
	err       string
	header    http.Header
	timing    sse.Timing
	body      []byte // non-streaming answers only
}

func (a answer) ok() bool { return a.err == "" && a.status == http.StatusOK }

// send posts body to path on the next gateway, rerouting on connection failures; stream
// reads the answer as SSE, otherwise it keeps the body.
func (b *balancer) send(ctx context.Context, c *http.Client, path string, body []byte, header http.Header, stream bool) answer {
	for range 2 * len(b.urls) {
		i := b.pick()
		if i < 0 {
			break
		}
		a, connFailed := post(ctx, c, b.urls[i]+path, body, header, stream)
		if !connFailed || ctx.Err() != nil {
			return a
		}
		b.failed(i)
	}
	return answer{err: "no gateway accepted the request"}
}

// post sends one request; connFailed reports a failure before any response byte.
func post(ctx context.Context, c *http.Client, u string, body []byte, header http.Header, stream bool) (a answer, connFailed bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return answer{err: err.Error()}, false
	}
	req.Header = header.Clone()
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return answer{err: err.Error()}, true
	}
	defer resp.Body.Close()
	a = answer{status: resp.StatusCode, header: resp.Header}
	if resp.StatusCode != http.StatusOK || !stream {
		a.body, err = io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if err != nil {
			a.err = err.Error()
		} else if resp.StatusCode != http.StatusOK {
			a.err = fmt.Sprintf("status %d: %.200s", resp.StatusCode, a.body)
		}
		return a, false
	}
	a.timing, err = sse.Read(resp.Body, start)
	switch {
	case err != nil:
		a.err, a.streaming = err.Error(), true
	case !a.timing.Done || a.timing.Events == 0:
		a.err, a.streaming = "stream ended without [DONE]", true
	}
	return a, false
}

// loadTally counts a load's requests by outcome.
type loadTally struct {
	Requests        int    `json:"requests"`
	OK              int    `json:"ok"`
	Slow            int    `json:"slow_path"` // answered by the slow pool
	FailedStreaming int    `json:"failed_streaming"`
	FailedOther     int    `json:"failed_not_streaming"`
	Rerouted        int64  `json:"rerouted"` // sent again to another gateway after a connection failure
	FirstError      string `json:"first_error,omitempty"`

	mu sync.Mutex
}

func (t *loadTally) add(a answer) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.Requests++
	switch {
	case a.ok():
		t.OK++
		if a.header.Get(server.HeaderPath) == router.PathSlow {
			t.Slow++
		}
		return
	case a.streaming:
		t.FailedStreaming++
	default:
		t.FailedOther++
	}
	if t.FirstError == "" {
		t.FirstError = a.err
	}
}

// chatStream is a streaming chat body with one user message.
func chatStream(system, user string, maxTokens int) []byte {
	msgs := []sweep.ChatMessage{{Role: "user", Content: user}}
	if system != "" {
		msgs = append([]sweep.ChatMessage{{Role: "system", Content: system}}, msgs...)
	}
	b, _ := json.Marshal(sweep.ChatBody{Model: "auto", Messages: msgs, Stream: true, MaxTokens: maxTokens})
	return b
}

// budgetLoad runs clients closed-loop streaming chat requests over texts (warmed in the
// result cache) for d, each client with its own session.
func (e *fleetEnv) budgetLoad(ctx context.Context, b *balancer, texts []string, d time.Duration) *loadTally {
	t := &loadTally{}
	load.ClosedLoop{Workers: e.c.BudgetClients, Duration: d}.Run(ctx, func(ctx context.Context, w int, seq int64) load.Sample {
		h := http.Header{http.CanonicalHeaderKey(server.HeaderSession): {"client-" + strconv.Itoa(w)}}
		a := b.send(ctx, e.client, "/v1/chat/completions", chatStream("", texts[int(seq)%len(texts)], e.c.BudgetTokens), h, true)
		t.add(a)
		return load.Sample{}
	})
	t.Rerouted = b.rerouted.Load()
	return t
}

// warmTexts takes n new texts and classifies them on every gateway, so the loads that use
// them are cache hits (the classifier stays out of what is measured).
func (e *fleetEnv) warmTexts(ctx context.Context, set *fleetGateways, n int) ([]string, error) {
	texts := make([]string, n)
	for i := range texts {
		texts[i] = e.texts.Take().Text
	}
	return texts, e.classifyAll(ctx, set, texts)
}

// classifyAll classifies texts on every gateway of set in batches of 16, waiting and
// trying again when a gateway sheds a batch (429: its classifier is busy).
func (e *fleetEnv) classifyAll(ctx context.Context, set *fleetGateways, texts []string) error {
	for _, u := range set.urls("/v1/classify") {
		for i := 0; i < len(texts); i += 16 {
			body, _ := json.Marshal(map[string]any{"texts": texts[i:min(i+16, len(texts))]})
			s := load.PostJSON(ctx, e.client, u, body, false)
			for try := 0; s.Status == http.StatusTooManyRequests && try < 50; try++ {
				if !sleepUntil(ctx, time.Now().Add(200*time.Millisecond)) {
					return ctx.Err()
				}
				s = load.PostJSON(ctx, e.client, u, body, false)
			}
			if !s.OK() {
				return fmt.Errorf("classify on %s: %s", u, load.FirstError([]load.Sample{s}))
			}
		}
	}
	return nil
}
