package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// holdingReplica is a replica whose generations take as long as the test wants: each waits
// until release is closed (then answers a small chat completion) or until its request is
// cancelled, which it counts — the abort vLLM does when the gateway's connection closes.
// A generation stops counting as running before it signals its cancellation, so a test that
// has received every cancellation reads running without a race against the handlers' return.
type holdingReplica struct {
	arrived   chan struct{}
	cancelled chan struct{}
	release   chan struct{}
	running   atomic.Int64
}

func newHoldingReplica() *holdingReplica {
	return &holdingReplica{arrived: make(chan struct{}, 64), cancelled: make(chan struct{}, 64), release: make(chan struct{})}
}

func (h *holdingReplica) generate(w http.ResponseWriter, r *http.Request, _ []byte) {
	h.running.Add(1)
	h.arrived <- struct{}{}
	select {
	case <-r.Context().Done():
		h.running.Add(-1)
		h.cancelled <- struct{}{}
	case <-h.release:
		h.running.Add(-1)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"held"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	}
}

// await receives n signals from ch, failing the test after a generous bound.
func await(t *testing.T, ch <-chan struct{}, n int, what string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for i := range n {
		select {
		case <-ch:
		case <-timeout:
			t.Fatalf("%s: %d of %d after 10s", what, i, n)
		}
	}
}

// rawRequest is a complete HTTP/1.1 POST of a JSON body.
func rawRequest(path, body string) string {
	return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: triage\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		path, len(body), body)
}

// handScanned runs the server with a watcher that scans only when the test calls scan.
func handScanned(c *gatewayConfig, o *testOptions) { o.goneEvery = time.Hour }

// scanUntil scans until n requests in all were cancelled, a bounded number of times: the
// departures are on loopback and normally all seen by the first scan.
func scanUntil(t *testing.T, g *goneWatcher, n int) (scans int) {
	t.Helper()
	total := 0
	for scans = 1; scans <= 200; scans++ {
		if total += g.scan(); total >= n {
			return scans
		}
		<-time.After(5 * time.Millisecond) // let the last FIN or RST land
	}
	t.Fatalf("the watcher cancelled %d of %d requests in 200 scans", total, n)
	return scans
}

// TestClientGoneWhileWaitingCancelsUpstream: clients that leave while their request waits on a slow
// replica — closing (FIN) or resetting (RST) their connection — have their upstream requests
// cancelled by the next scan; the slow-path slots, the in-flight counts and the replica's
// running requests all go back to zero without waiting for the replica.
func TestClientGoneWhileWaitingCancelsUpstream(t *testing.T) {
	const clients = 20
	for _, tc := range []struct {
		name, path, body, endpoint string
	}{
		{"chat", "/v1/chat/completions", `{"messages":[{"role":"user","content":"write an epic p=0.9"}]}`, "chat_completions"},
		{"completions", "/v1/completions", `{"prompt":"write an epic p=0.9","max_tokens":5}`, "completions"},
		{"query-process", "/v1/query-process", `{"text":"write an epic p=0.9"}`, "query_process"},
		{"messages", "/v1/messages", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"write an epic p=0.9"}]}`, "messages"},
		{"responses", "/v1/responses", `{"model":"m","input":"write an epic p=0.9"}`, "responses"},
		// A stream waits for its headers (the replica's queue) in the handler too.
		{"stream before its headers", "/v1/chat/completions", `{"stream":true,"messages":[{"role":"user","content":"write an epic p=0.9"}]}`, "chat_completions"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := startServer(t, handScanned)
			h := newHoldingReplica()
			ts.slow.onGenerate = h.generate
			defer close(h.release)

			conns := make([]*net.TCPConn, clients)
			for i := range conns {
				c, err := net.Dial("tcp", strings.TrimPrefix(ts.url, "http://"))
				require.NoError(t, err)
				conns[i] = c.(*net.TCPConn)
				_, err = io.WriteString(c, rawRequest(tc.path, tc.body))
				require.NoError(t, err)
			}
			await(t, h.arrived, clients, "requests at the replica")
			require.Equal(t, float64(clients), metricValue(t, ts.url, "triage_slow_active"))
			require.Equal(t, clients, ts.gone.count())

			for i, c := range conns {
				if i%2 == 1 {
					require.NoError(t, c.SetLinger(0)) // close with a reset
				}
				require.NoError(t, c.Close())
			}
			left := time.Now()
			scans := scanUntil(t, ts.gone, clients)
			await(t, h.cancelled, clients, "cancellations at the replica")
			eventually(t, func() bool { return ts.active.count() == 0 && ts.Server.fast.InFlight()+ts.Server.slow.InFlight() == 0 },
				"in-flight requests back to zero")
			t.Logf("%d departures: cancelled after %d scan(s), everything released %s after the clients left",
				clients, scans, time.Since(left))

			require.Zero(t, h.running.Load(), "the replica runs nothing")
			require.Zero(t, ts.gone.count(), "nothing left watched")
			require.Zero(t, metricValue(t, ts.url, "triage_slow_active"))
			require.Equal(t, float64(clients), metricValue(t, ts.url, "triage_server_client_gone_total"))
			require.Equal(t, float64(clients), metricValue(t, ts.url, `triage_requests_total{code="499",endpoint="`+tc.endpoint+`"}`))
			require.Equal(t, float64(clients), metricValue(t, ts.url, `triage_upstream_requests_total{outcome="canceled",pool="slow",replica="slow-0"}`))
		})
	}
}

// TestClientGoneRunsOnItsOwn: with the server's own watcher goroutine (no scans by hand), a
// client that leaves has its request cancelled within a few intervals.
func TestClientGoneRunsOnItsOwn(t *testing.T) {
	ts := startServer(t, func(_ *gatewayConfig, o *testOptions) { o.goneEvery = 10 * time.Millisecond })
	h := newHoldingReplica()
	ts.slow.onGenerate = h.generate
	defer close(h.release)

	c, err := net.Dial("tcp", strings.TrimPrefix(ts.url, "http://"))
	require.NoError(t, err)
	_, err = io.WriteString(c, rawRequest("/v1/chat/completions", `{"messages":[{"role":"user","content":"epic p=0.9"}]}`))
	require.NoError(t, err)
	await(t, h.arrived, 1, "the request at the replica")
	require.NoError(t, c.Close())
	await(t, h.cancelled, 1, "the cancellation at the replica")
	eventually(t, func() bool { return ts.active.count() == 0 }, "the request ended")
}

// readResponses reads n HTTP/1.1 responses from r, bodies included.
func readResponses(t *testing.T, r *bufio.Reader, n int) (out []*http.Response, bodies []string) {
	t.Helper()
	for range n {
		resp, err := http.ReadResponse(r, nil)
		require.NoError(t, err)
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		resp.Body.Close()
		out, bodies = append(out, resp), append(bodies, string(b))
	}
	return out, bodies
}

// TestPipelinedRequestIsNotADeparture: a second request pipelined behind one waiting on a
// replica — whether fasthttp has already buffered it or it still sits in the socket, where
// the watcher sees its bytes — is neither taken for a departure nor disturbed: both are
// answered, in order, in full.
func TestPipelinedRequestIsNotADeparture(t *testing.T) {
	slowReq := rawRequest("/v1/chat/completions", `{"messages":[{"role":"user","content":"write an epic p=0.9"}]}`)
	fastReq := rawRequest("/v1/chat/completions", `{"messages":[{"role":"user","content":"hello p=0.1"}]}`)
	for _, tc := range []struct {
		name     string
		oneWrite bool
	}{
		{"both in one write", true},
		{"second sent while the first waits", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := startServer(t, handScanned)
			h := newHoldingReplica()
			ts.slow.onGenerate = h.generate

			c, err := net.Dial("tcp", strings.TrimPrefix(ts.url, "http://"))
			require.NoError(t, err)
			defer c.Close()
			if tc.oneWrite {
				_, err = io.WriteString(c, slowReq+fastReq)
				require.NoError(t, err)
				await(t, h.arrived, 1, "the first request at the replica")
			} else {
				_, err = io.WriteString(c, slowReq)
				require.NoError(t, err)
				await(t, h.arrived, 1, "the first request at the replica")
				_, err = io.WriteString(c, fastReq)
				require.NoError(t, err)
			}
			for range 3 {
				require.Zero(t, ts.gone.scan(), "pipelined bytes are not a departure")
			}
			close(h.release)

			resps, bodies := readResponses(t, bufio.NewReader(c), 2)
			for i, path := range []string{"slow", "fast"} {
				require.Equal(t, http.StatusOK, resps[i].StatusCode, bodies[i])
				require.Equal(t, path, resps[i].Header.Get(HeaderPath))
				var out map[string]any
				require.NoError(t, json.Unmarshal([]byte(bodies[i]), &out), "a whole body: %s", bodies[i])
			}
			require.Contains(t, bodies[0], `"held"`)
			require.Zero(t, metricValue(t, ts.url, "triage_server_client_gone_total"))
			require.Empty(t, h.cancelled)
		})
	}
}

// TestKeepAliveConnectionIsNotWatchedBetweenRequests: a keep-alive connection is watched only
// while one of its requests waits on a replica; a client that closes it after its answers
// has left nothing to cancel.
func TestKeepAliveConnectionIsNotWatchedBetweenRequests(t *testing.T) {
	ts := startServer(t, handScanned)
	h := newHoldingReplica()
	ts.slow.onGenerate = h.generate

	c, err := net.Dial("tcp", strings.TrimPrefix(ts.url, "http://"))
	require.NoError(t, err)
	r := bufio.NewReader(c)
	_, err = io.WriteString(c, rawRequest("/v1/chat/completions", `{"messages":[{"role":"user","content":"write an epic p=0.9"}]}`))
	require.NoError(t, err)
	await(t, h.arrived, 1, "the request at the replica")
	require.Equal(t, 1, ts.gone.count())
	require.Zero(t, ts.gone.scan(), "a client waiting is not gone")
	close(h.release)
	resps, bodies := readResponses(t, r, 1)
	require.Equal(t, http.StatusOK, resps[0].StatusCode, bodies[0])
	require.Zero(t, ts.gone.count(), "nothing watched between requests")

	_, err = io.WriteString(c, rawRequest("/v1/query-process", `{"text":"hello p=0.1"}`))
	require.NoError(t, err)
	resps, bodies = readResponses(t, r, 1)
	require.Equal(t, http.StatusOK, resps[0].StatusCode, bodies[0])
	require.JSONEq(t, `{"label":"0"}`, bodies[0])

	require.NoError(t, c.Close())
	require.Zero(t, ts.gone.scan())
	require.Zero(t, metricValue(t, ts.url, "triage_server_client_gone_total"))
	require.Empty(t, h.cancelled)
}

// tcpPair is a connected loopback pair: the server's side wrapped as connListener hands it
// out, and the client's.
func tcpPair(t testing.TB) (server net.Conn, client *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	m, err := newMetrics(prometheus.NewRegistry())
	require.NoError(t, err)
	cl := newConnListener(ln, 10, 0, m, nil, nil)
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := cl.Accept()
		if err != nil {
			c = nil
		}
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	select {
	case server = <-accepted:
	case <-time.After(10 * time.Second):
		t.Fatal("accept timed out")
	}
	require.NotNil(t, server)
	t.Cleanup(func() { server.Close(); c.Close() })
	return server, c.(*net.TCPConn)
}

func TestGoneWatcher(t *testing.T) {
	// The counter is checked through the server's /metrics in TestClientGoneWhileWaitingCancelsUpstream.
	newWatcher := func() (*goneWatcher, prometheus.Counter) {
		gone := prometheus.NewCounter(prometheus.CounterOpts{Name: "gone"})
		return newGoneWatcher(time.Hour, gone, nil), gone
	}

	t.Run("not a socket: not watched", func(t *testing.T) {
		g, _ := newWatcher()
		a, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		require.Nil(t, g.watch(a, func(error) { t.Fatal("cancelled") }))
		require.Zero(t, g.count())
		g.unwatch(nil) // a no-op
	})

	t.Run("unwatched before the scan: never cancelled", func(t *testing.T) {
		g, _ := newWatcher()
		srv, cli := tcpPair(t)
		w := g.watch(srv, func(error) { t.Fatal("cancelled after unwatch") })
		require.NotNil(t, w)
		require.NoError(t, cli.Close())
		g.unwatch(w)
		require.Zero(t, g.scan())
	})

	t.Run("reset, end of file, waiting, pending bytes", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			do   func(*net.TCPConn)
			gone bool
		}{
			{"waiting", func(*net.TCPConn) {}, false},
			{"pending bytes", func(c *net.TCPConn) { io.WriteString(c, "GET / HTTP/1.1\r\n\r\n") }, false},
			{"end of file", func(c *net.TCPConn) { c.Close() }, true},
			{"half-closed", func(c *net.TCPConn) { c.CloseWrite() }, true},
			{"reset", func(c *net.TCPConn) { c.SetLinger(0); c.Close() }, true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				g, _ := newWatcher()
				srv, cli := tcpPair(t)
				causes := make(chan error, 1)
				w := g.watch(srv, func(err error) { causes <- err })
				tc.do(cli)
				if !tc.gone {
					for range 3 {
						require.Zero(t, g.scan())
					}
					require.Equal(t, 1, g.count())
					g.unwatch(w)
					return
				}
				scanUntil(t, g, 1)
				require.ErrorIs(t, <-causes, errClientGone)
				require.Zero(t, g.scan(), "cancelled once")
				g.unwatch(w)
			})
		}
	})

	t.Run("pending bytes are left in place", func(t *testing.T) {
		g, _ := newWatcher()
		srv, cli := tcpPair(t)
		w := g.watch(srv, func(error) { t.Fatal("cancelled") })
		const msg = "GET /next HTTP/1.1\r\n\r\n"
		_, err := io.WriteString(cli, msg)
		require.NoError(t, err)
		for range 3 {
			require.Zero(t, g.scan())
		}
		g.unwatch(w)
		buf := make([]byte, len(msg))
		require.NoError(t, srv.SetReadDeadline(time.Now().Add(10*time.Second)))
		_, err = io.ReadFull(srv, buf)
		require.NoError(t, err)
		require.Equal(t, msg, string(buf), "peeking consumed nothing")
	})

	t.Run("Run stops with its context", func(t *testing.T) {
		g, _ := newWatcher()
		g.every = time.Millisecond
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- g.Run(ctx) }()
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return")
		}
	})
}
