package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/classifier"
	"github.com/triage-gw/triage/internal/testnet"
	"github.com/triage-gw/triage/router"
	"github.com/triage-gw/triage/upstream"
)

func TestChatProxiesToTheChosenPoolWithItsModel(t *testing.T) {
	fastURL, slowURL := simUpstream(t, "sim-fast", "mock-fast"), simUpstream(t, "sim-slow", "mock-slow")
	cfg := testConfig([]string{fastURL}, []string{slowURL})
	cfg.Pools.Fast.Model, cfg.Pools.Slow.Model = "mock-fast", "mock-slow"
	model := newFakeModel("v1")
	_, url, _ := run(t, cfg, testOptions{load: func() (router.Model, error) { return model, nil }})

	for _, tc := range []struct{ text, model, path string }{
		{"hello p=0.1", "mock-fast", "fast"},
		{"write an epic p=0.9", "mock-slow", "slow"},
	} {
		resp, body := postJSON(t, url+"/v1/chat/completions",
			`{"model":"whatever","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"`+tc.text+`"}],"max_tokens":3}`)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		require.Equal(t, tc.path, resp.Header.Get(HeaderPath))
		require.Equal(t, tc.path+"-0", resp.Header.Get(HeaderReplica))
		require.Equal(t, "sim-"+tc.path, resp.Header.Get("x-mockllm-replica"), "upstream headers pass through")
		var out struct {
			Model   string `json:"model"`
			Choices []struct {
				Message struct{ Content string } `json:"message"`
			} `json:"choices"`
		}
		require.NoError(t, json.Unmarshal(body, &out))
		require.Equal(t, tc.model, out.Model, "the model is rewritten to the chosen pool's")
		require.NotEmpty(t, out.Choices[0].Message.Content)
	}
	require.Equal(t, []string{"hello p=0.1", "write an epic p=0.9"}, model.seen()[1:], "the last user message is classified")

	resp, body := postJSON(t, url+"/v1/completions", `{"prompt":"once upon a time p=0.95","max_tokens":2}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Equal(t, "slow", resp.Header.Get(HeaderPath))
	require.Contains(t, string(body), `"model":"mock-slow"`)

	resp, body = do(t, http.MethodGet, url+"/v1/models", "", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(body), `"id":"mock-fast"`)
	require.Contains(t, string(body), `"id":"mock-slow"`)
}

func TestChatContextForwardingAndRouting(t *testing.T) {
	ts := startServer(t)
	// Multi-part content: the first text part is the instruction, later ones the context.
	resp, body := postJSON(t, ts.url+"/v1/chat/completions", `{"messages":[
		{"role":"user","content":"earlier turn"},
		{"role":"assistant","content":null},
		{"role":"user","content":[{"type":"text","text":"Summarise"},{"type":"image_url","image_url":{"url":"u"}},{"type":"text","text":"The  document."}]}
	],"user":"alice","temperature":0.2}`, "Authorization", "Bearer client-secret", "X-Request-Id", "req-1")
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Contains(t, ts.model.seen(), "Summarise [SEP] The document.")
	got := ts.fast.requests()[0]
	require.Equal(t, "model-fast", got.body["model"])
	require.Equal(t, 0.2, got.body["temperature"], "unknown fields pass through")
	require.Equal(t, "alice", got.body["user"])
	require.Empty(t, got.header.Get("Authorization"), "the client's credentials stay at the gateway")
	require.Equal(t, "req-1", got.header.Get("X-Request-Id"))

	// A top-level "context" is the context and is not forwarded.
	resp, body = postJSON(t, ts.url+"/v1/chat/completions", `{"messages":[{"role":"user","content":"Answer <briefly>"}],"context":"Attached & quoted."}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Contains(t, ts.model.seen(), "Answer <briefly> [SEP] Attached & quoted.")
	got = ts.fast.requests()[1]
	require.NotContains(t, got.body, "context")
	require.Equal(t, "Answer <briefly>", got.body["messages"].([]any)[0].(map[string]any)["content"])
}

func TestUpstreamStatusAndBodyPassThrough(t *testing.T) {
	ts := startServer(t)
	ts.fast.onGenerate = func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Upstream", "yes")
		w.WriteHeader(http.StatusUnprocessableEntity)
		w.Write([]byte(`{"error":{"message":"bad temperature"}}`))
	}
	resp, body := postJSON(t, ts.url+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusUnprocessableEntity, resp.StatusCode)
	require.Equal(t, `{"error":{"message":"bad temperature"}}`, string(body))
	require.Equal(t, "yes", resp.Header.Get("X-Upstream"))
	require.Equal(t, "fast", resp.Header.Get(HeaderPath))
	// Read whole before the headers, a non-streamed answer goes out with its length, in one
	// write rather than chunked.
	require.Equal(t, int64(len(body)), resp.ContentLength)
	require.Empty(t, resp.TransferEncoding)
}

// TestAnswerLongerThanThePrefetchIsPassedOnWhole: an answer longer than maxPrefetch is not
// held back; it is passed on chunked, every byte of it.
func TestAnswerLongerThanThePrefetchIsPassedOnWhole(t *testing.T) {
	ts := startServer(t)
	long := bytes.Repeat([]byte("x"), maxPrefetch+4096)
	ts.fast.onGenerate = func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(long)
	}
	resp, body := postJSON(t, ts.url+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, len(long), len(body))
	require.True(t, bytes.Equal(long, body))
	require.Equal(t, []string{"chunked"}, resp.TransferEncoding)
}

// TestStreamingPassesChunksAsTheyArrive proves the proxy does not buffer: the client reads
// the first event while the replica is still holding back the second. The slow slot stays
// held until the stream has ended.
func TestStreamingPassesChunksAsTheyArrive(t *testing.T) {
	g := newGate()
	ts := startServer(t)
	ts.slow.onGenerate = func(w http.ResponseWriter, r *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write([]byte("data: {\"n\":1}\n\n"))
		w.(http.Flusher).Flush()
		if !g.wait(r) {
			return
		}
		w.Write([]byte("data: {\"n\":2}\n\ndata: [DONE]\n\n"))
	}
	resp, err := http.Post(ts.url+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"stream":true,"messages":[{"role":"user","content":"tell me a story p=0.9"}]}`))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	require.Equal(t, "slow", resp.Header.Get(HeaderPath))

	rd := bufio.NewReader(resp.Body)
	line, err := rd.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "data: {\"n\":1}\n", line, "the first event arrives before the replica sends the rest")
	require.Equal(t, 1, ts.router.State().SlowActive, "the slow slot is held while the stream runs")

	g.release()
	rest, err := io.ReadAll(rd)
	require.NoError(t, err)
	require.Equal(t, "\ndata: {\"n\":2}\n\ndata: [DONE]\n\n", string(rest))
	eventually(t, func() bool { return ts.router.State().SlowActive == 0 && ts.active.count() == 0 }, "slot and request released when the stream ends")
}

// TestClientGoneCancelsUpstream: when the client disconnects mid-stream, the next write
// fails, the upstream body is closed and the replica sees its request cancelled.
func TestClientGoneCancelsUpstream(t *testing.T) {
	cancelled := make(chan struct{})
	ts := startServer(t)
	ts.slow.onGenerate = func(w http.ResponseWriter, r *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "text/event-stream")
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			w.Write([]byte("data: {}\n\n"))
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				close(cancelled)
				return
			case <-tick.C:
			}
		}
	}
	resp, err := http.Post(ts.url+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"stream":true,"messages":[{"role":"user","content":"endless p=0.9"}]}`))
	require.NoError(t, err)
	_, err = bufio.NewReader(resp.Body).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, 1, ts.router.State().SlowActive)
	resp.Body.Close() // the client goes away

	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("upstream request was not cancelled after the client left")
	}
	eventually(t, func() bool { return ts.router.State().SlowActive == 0 && ts.active.count() == 0 }, "slot and request released")
}

func TestProxyErrorsMapToStatuses(t *testing.T) {
	chat := `{"messages":[{"role":"user","content":"hi p=0.1"}]}`

	t.Run("no healthy replica is 503", func(t *testing.T) {
		ts := startServer(t)
		require.NoError(t, ts.Server.fast.Drain("fast-0"))
		resp, body := postJSON(t, ts.url+"/v1/chat/completions", chat)
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, string(body))
		require.Equal(t, "no_healthy_replica", *apiErr(t, body).Code)
	})
	t.Run("admission rejection is 429", func(t *testing.T) {
		ts := startServer(t, func(c *gatewayConfig, _ *testOptions) { c.Pools.Fast.Admission.Name = upstream.AdmitRejectAll })
		resp, body := postJSON(t, ts.url+"/v1/chat/completions", chat)
		require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, string(body))
		require.Equal(t, "1", resp.Header.Get("Retry-After"))
	})
	t.Run("unreachable replica is 502", func(t *testing.T) {
		ts := startServer(t)
		ts.fast.srv.Close()
		testnet.HoldPort(t, ts.fast.srv.Listener.Addr().String())
		resp, body := postJSON(t, ts.url+"/v1/chat/completions", chat)
		require.Equal(t, http.StatusBadGateway, resp.StatusCode, string(body))
		require.Equal(t, "upstream_error", *apiErr(t, body).Code)
	})
	t.Run("request timeout is 504", func(t *testing.T) {
		// The first-byte timeout must be shorter than the request timeout (config), so the
		// request timeout is met here while the request waits for its classification.
		ts := startServer(t, func(c *gatewayConfig, _ *testOptions) {
			c.Server.RequestTimeout = 200 * time.Millisecond
			c.Routing.ClassifyBudget = 0 // no budget: the request waits for its classification
			c.Pools.Fast.Timeouts.FirstByte = upstream.Duration(100 * time.Millisecond)
			c.Pools.Slow.Timeouts.FirstByte = upstream.Duration(100 * time.Millisecond)
		})
		unblock := make(chan struct{})
		defer close(unblock)
		ts.model.classify = func(ctx context.Context, texts []string) ([]classifier.Result, error) {
			<-unblock // the startup probe has run; this holds the request's classification
			return scoreTexts(texts), nil
		}
		resp, body := postJSON(t, ts.url+"/v1/chat/completions", chat)
		require.Equal(t, http.StatusGatewayTimeout, resp.StatusCode, string(body))
		require.Contains(t, apiErr(t, body).Message, "server.request_timeout")
	})
	t.Run("first-byte timeout is 504", func(t *testing.T) {
		g := newGate()
		defer g.release()
		ts := startServer(t, func(c *gatewayConfig, _ *testOptions) {
			c.Pools.Fast.Timeouts.FirstByte = upstream.Duration(100 * time.Millisecond)
		})
		ts.fast.onGenerate = func(_ http.ResponseWriter, r *http.Request, _ []byte) { g.wait(r) }
		resp, body := postJSON(t, ts.url+"/v1/query-process", `{"text":"p=0.1"}`)
		require.Equal(t, http.StatusGatewayTimeout, resp.StatusCode, string(body))
	})
}

// Clients are told the pool and the replica id of a failed upstream and the kind of failure,
// never the replica's address; the failed replica is named in x-router-replica, as on every
// routed answer.
func TestUpstreamErrorsNameIdsNotAddresses(t *testing.T) {
	cfg := testConfig([]string{testnet.RefusedURL(t)}, []string{testnet.RefusedURL(t)})
	cfg.Pools.Fast.Replicas[0].ID = "" // the default id must not be the URL either
	_, url, _ := run(t, cfg, testOptions{load: func() (router.Model, error) { return newFakeModel("v1"), nil }})
	for _, path := range []string{"/v1/chat/completions", "/v1/query-process"} {
		body := `{"messages":[{"role":"user","content":"hi p=0.1"}]}`
		if path == "/v1/query-process" {
			body = `{"text":"hi p=0.1"}`
		}
		resp, b := postJSON(t, url+path, body)
		require.Equal(t, http.StatusBadGateway, resp.StatusCode, string(b))
		require.NotContains(t, string(b), "127.0.0.1", "no address in the answer")
		require.NotContains(t, string(b), "http://")
		require.Equal(t, "upstream fast/fast-0: connection refused", apiErr(t, b).Message)
		require.Equal(t, "fast-0", resp.Header.Get(HeaderReplica))
	}
}

// A client that opens a stream and stops reading no longer pins its slow-path slot: once its
// buffers are full, the next write blocks for write_stall_timeout and the response is cut,
// the upstream request cancelled and the slot released. Before, the slot and the upstream
// stream were held for as long as the replica kept producing.
func TestClientThatStopsReadingReleasesItsSlot(t *testing.T) {
	ts := startServer(t, func(c *gatewayConfig, _ *testOptions) {
		c.Server.WriteStallTimeout = 300 * time.Millisecond
	})
	upstreamGone := make(chan struct{})
	ts.slow.onGenerate = func(w http.ResponseWriter, r *http.Request, _ []byte) {
		defer close(upstreamGone)
		w.Header().Set("Content-Type", "text/event-stream")
		chunk := "data: " + strings.Repeat("x", 32<<10) + "\n\n"
		for {
			if _, err := io.WriteString(w, chunk); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			default:
			}
		}
	}
	conn, err := net.Dial("tcp", strings.TrimPrefix(ts.url, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.(*net.TCPConn).SetReadBuffer(4096))
	body := `{"stream":true,"messages":[{"role":"user","content":"an epic p=0.9"}]}`
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	// Read nothing.
	eventually(t, func() bool { return ts.router.State().SlowActive == 1 }, "the stream holds a slow slot")
	select {
	case <-upstreamGone:
	case <-time.After(20 * time.Second):
		t.Fatal("the upstream stream was not cancelled")
	}
	eventually(t, func() bool { return ts.router.State().SlowActive == 0 && ts.active.count() == 0 }, "slot and request released")
	_, metrics := do(t, http.MethodGet, ts.url+"/metrics", "", nil)
	require.Contains(t, string(metrics), "triage_client_write_stalls_total 1")
}

// The write deadline a stream arms is cleared when it ends: the next response on the same
// keep-alive connection, after the stall bound has long passed, is written normally.
func TestStallDeadlineDoesNotOutliveItsStream(t *testing.T) {
	ts := startServer(t, func(c *gatewayConfig, _ *testOptions) {
		c.Server.WriteStallTimeout = 100 * time.Millisecond
	})
	ts.fast.onGenerate = func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {}\n\ndata: [DONE]\n\n")
	}
	conn, err := net.Dial("tcp", strings.TrimPrefix(ts.url, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	br := bufio.NewReader(conn)
	body := `{"stream":true,"messages":[{"role":"user","content":"hi"}]}`
	for i := range 2 {
		fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		resp, err := http.ReadResponse(br, nil)
		require.NoError(t, err, "request %d on one connection", i)
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Contains(t, string(b), "[DONE]")
		time.Sleep(300 * time.Millisecond) // let a leaked deadline expire before the next write
	}
}

// A replica that accepts and never answers is caught by the per-attempt first-byte timeout
// (which the config requires to be shorter than the request timeout), counted against it and
// ejected. Under the default retry rule each request it held is a 504 naming it (the replica
// may have been generating it: not retried); with first_byte_timeout in retry.on each goes on
// to the healthy replica and no client sees the hung one. Either way, once it is ejected
// nothing more is sent there.
func TestHungReplicaIsEjected(t *testing.T) {
	for _, tc := range []struct {
		name    string
		retryOn []upstream.RetryOn // nil: the default rule
		outcome string             // fast-0's two timed-out attempts
	}{
		{"default rule: 504 naming it", nil, "timeout"},
		{"first_byte_timeout retried", append(upstream.DefaultRetryConfig().On, upstream.RetryFirstByteTimeout), "retried"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/health" {
					return
				}
				io.Copy(io.Discard, r.Body) // net/http notices the client leaving only after the body is read
				<-r.Context().Done()
			}))
			t.Cleanup(hung.Close)
			ok := newFakeUpstream(t)
			cfg := testConfig([]string{hung.URL, ok.srv.URL}, []string{newFakeUpstream(t).srv.URL})
			cfg.Server.RequestTimeout = 5 * time.Second
			cfg.Pools.Fast.Timeouts.FirstByte = upstream.Duration(200 * time.Millisecond)
			cfg.Pools.Slow.Timeouts.FirstByte = upstream.Duration(time.Second)
			cfg.Pools.Fast.PassiveEjection.ConsecutiveFailures = 2
			if tc.retryOn != nil {
				cfg.Pools.Fast.Retry.On = tc.retryOn
			}
			// Round robin: the hung replica gets every other request until it is ejected.
			cfg.Pools.Fast.Policy.Name = "round-robin"
			s, url, _ := run(t, cfg, testOptions{load: func() (router.Model, error) { return newFakeModel("v1"), nil }})

			timeouts := 0
			for range 12 {
				resp, body := postJSON(t, url+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi p=0.1"}]}`)
				if resp.StatusCode == http.StatusGatewayTimeout {
					require.Nil(t, tc.retryOn, "retried requests never time out: %s", body)
					require.Equal(t, "fast-0", resp.Header.Get(HeaderReplica))
					timeouts++
					continue
				}
				require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
				require.Equal(t, "fast-1", resp.Header.Get(HeaderReplica))
			}
			if tc.retryOn == nil {
				require.Equal(t, 2, timeouts, "two timeouts eject it")
			}
			require.Equal(t, upstream.StateEjected, s.fast.Replicas()[0].State)
			_, metrics := do(t, http.MethodGet, url+"/metrics", "", nil)
			require.Contains(t, string(metrics), `triage_upstream_requests_total{outcome="`+tc.outcome+`",pool="fast",replica="fast-0"} 2`,
				"two timeouts eject it; nothing more is sent there")
		})
	}
}

// With no other replica, the first-byte timeout is a 504 naming the hung replica.
func TestHungOnlyReplicaIs504(t *testing.T) {
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			return
		}
		io.Copy(io.Discard, r.Body)
		<-r.Context().Done()
	}))
	t.Cleanup(hung.Close)
	cfg := testConfig([]string{hung.URL}, []string{newFakeUpstream(t).srv.URL})
	cfg.Server.RequestTimeout = 5 * time.Second
	cfg.Pools.Fast.Timeouts.FirstByte = upstream.Duration(200 * time.Millisecond)
	cfg.Pools.Slow.Timeouts.FirstByte = upstream.Duration(time.Second)
	_, url, _ := run(t, cfg, testOptions{load: func() (router.Model, error) { return newFakeModel("v1"), nil }})
	start := time.Now()
	resp, body := postJSON(t, url+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi p=0.1"}]}`)
	require.Equal(t, http.StatusGatewayTimeout, resp.StatusCode, "%s", body)
	require.Equal(t, "fast-0", resp.Header.Get(HeaderReplica), "a 504 names its replica")
	require.Less(t, time.Since(start), 2*time.Second, "the first-byte timeout, not the request timeout")
	require.Equal(t, "upstream fast/fast-0: no response in time", apiErr(t, body).Message)
}

// TestLongPromptIsRoutedAndSentWhole: an agent's request whose last user message is far
// over server.max_text_bytes (a pasted file) is routed on the head of that message, and the
// replica gets every byte of it, on the chat, Messages and Responses endpoints.
func TestLongPromptIsRoutedAndSentWhole(t *testing.T) {
	ts := startServer(t, func(c *gatewayConfig, _ *testOptions) {
		c.Server.BodyLimit = 1 << 20
		c.Server.MaxTextBytes = 1024
	})
	file := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 200<<10/45)
	// Each endpoint's message opens differently, so none is the cache's hit.
	msgs := map[string]string{}
	for _, path := range []string{"/v1/chat/completions", "/v1/messages", "/v1/responses"} {
		msgs[path] = "Review this file for " + path + " p=0.9 " + file
	}
	for _, tc := range []struct{ path, body string }{
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":` + jsonString(msgs["/v1/chat/completions"]) + `}]}`},
		{"/v1/messages", `{"model":"auto","max_tokens":8,"messages":[{"role":"user","content":` + jsonString(msgs["/v1/messages"]) + `}]}`},
		{"/v1/responses", `{"model":"auto","input":` + jsonString(msgs["/v1/responses"]) + `}`},
	} {
		t.Run(tc.path, func(t *testing.T) {
			before := len(ts.model.seen())
			resp, body := postJSON(t, ts.url+tc.path, tc.body)
			require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
			require.Equal(t, "slow", resp.Header.Get(HeaderPath), "routed on the message's head (p=0.9)")
			seen := ts.model.seen()[before:]
			require.Len(t, seen, 1)
			require.LessOrEqual(t, len(seen[0]), 1024)
			require.True(t, strings.HasPrefix(seen[0], "Review this file for "+tc.path+" p=0.9 The quick brown fox"))
			got := ts.slow.requests()
			require.Contains(t, fmt.Sprint(got[len(got)-1].body), file, "the replica gets the whole message")
		})
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
