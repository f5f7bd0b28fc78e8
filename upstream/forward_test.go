package upstream

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/upstream/policy"
)

// flushEvent writes one SSE event and pushes it onto the wire.
func flushEvent(w http.ResponseWriter, data string) {
	io.WriteString(w, "data: "+data+"\n\n")
	w.(http.Flusher).Flush()
}

func sseHeaders(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
}

// readEvent reads one SSE event (up to its blank line) from br.
func readEvent(br *bufio.Reader) (string, error) {
	var sb strings.Builder
	for {
		line, err := br.ReadString('\n')
		sb.WriteString(line)
		if err != nil {
			return sb.String(), err
		}
		if line == "\n" {
			return sb.String(), nil
		}
	}
}

// closeConn drops the client's TCP connection without an HTTP answer (or
// mid-answer, after whatever was flushed).
func closeConn(t *testing.T, w http.ResponseWriter) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err != nil {
		t.Errorf("hijack: %v", err)
		return
	}
	conn.Close()
}

func TestDoNonStreaming(t *testing.T) {
	type seen struct {
		method, path, auth, conn, custom, ctype string
		body                                    map[string]any
	}
	got := make(chan seen, 1)
	srv := replicaServer(t, func(w http.ResponseWriter, r *http.Request) {
		var s seen
		s.method, s.path = r.Method, r.URL.RequestURI()
		s.auth, s.conn, s.custom = r.Header.Get("Authorization"), r.Header.Get("X-Hop"), r.Header.Get("X-Custom")
		s.ctype = r.Header.Get("Content-Type")
		_ = json.NewDecoder(r.Body).Decode(&s.body)
		got <- s
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Replica", "yes")
		io.WriteString(w, `{"id":"c1","choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":5,"completion_tokens":7}}`)
	})
	cfg := testConfig(srv.URL)
	cfg.Replicas[0].Headers = map[string]string{"authorization": "Bearer upstream-key"}
	var done doneLog
	f := newFixture(t, cfg, &stubPicker{done: done.record}, nil)

	hdr := http.Header{}
	hdr.Set("Authorization", "Bearer client-key")
	hdr.Set("Connection", "X-Hop")
	hdr.Set("X-Hop", "dropped")
	hdr.Set("X-Custom", "kept")
	resp, err := f.pool.Do(context.Background(), &ForwardRequest{
		Method:   http.MethodPost,
		Path:     "/v1/chat/completions?trace=1",
		Header:   hdr,
		Body:     []byte(`{"model":"auto","messages":[{"role":"user","content":"hi"}],"temperature":0.70,"x_extra":{"a":[1,2]}}`),
		SetModel: true,
	})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.Status)
	require.Equal(t, "r0", resp.ReplicaID)
	require.Equal(t, "pool-model", resp.Model)
	require.False(t, resp.Retried)
	require.Equal(t, "yes", resp.Header.Get("X-Replica"))
	require.Equal(t, 1, f.pool.InFlight())

	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Contains(t, string(body), `"completion_tokens":7`)
	require.NoError(t, resp.Body.Close())
	require.NoError(t, resp.Body.Close(), "a second Close is a no-op")

	s := <-got
	require.Equal(t, "POST", s.method)
	require.Equal(t, "/v1/chat/completions?trace=1", s.path)
	require.Equal(t, "Bearer upstream-key", s.auth, "replica headers replace the client's")
	require.Empty(t, s.conn, "headers named by Connection are hop-by-hop")
	require.Equal(t, "kept", s.custom)
	require.Equal(t, "application/json", s.ctype)
	require.Equal(t, "pool-model", s.body["model"])
	require.Equal(t, 0.70, s.body["temperature"])
	require.Equal(t, map[string]any{"a": []any{1.0, 2.0}}, s.body["x_extra"])

	require.Equal(t, 0, f.pool.InFlight())
	require.Equal(t, []doneCall{{"r0", 7}}, done.all(), "Done gets usage.completion_tokens")
	require.Equal(t, 1.0, f.outcomes(t, "r0", "ok"))
	require.Equal(t, 1.0, f.metric(t, "triage_upstream_ttfb_seconds", map[string]string{"replica": "r0"}))
	require.Equal(t, 0.0, f.metric(t, "triage_upstream_inflight", map[string]string{"replica": "r0"}))
}

func TestDoStreamsIncrementally(t *testing.T) {
	release := make(chan struct{})
	srv := replicaServer(t, func(w http.ResponseWriter, r *http.Request) {
		sseHeaders(w)
		flushEvent(w, `{"choices":[{"delta":{"content":"Hel"}}]}`)
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		flushEvent(w, `{"choices":[{"delta":{"content":"lo"}}]}`)
		flushEvent(w, "[DONE]")
	})
	var done doneLog
	f := newFixture(t, testConfig(srv.URL), &stubPicker{done: done.record}, nil)

	resp, err := f.pool.Do(context.Background(), &ForwardRequest{Method: "POST", Path: "/v1/chat/completions", Body: []byte(`{"stream":true}`)})
	require.NoError(t, err)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	br := bufio.NewReader(resp.Body)

	// The server sends the second event only after we hold the first: a
	// buffering proxy would never deliver it and the wait below would fail.
	first := make(chan string, 1)
	go func() {
		ev, _ := readEvent(br)
		first <- ev
	}()
	select {
	case ev := <-first:
		require.Contains(t, ev, "Hel")
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("first SSE event was not delivered before the second was written: the body is buffered")
	}
	close(release)

	rest, err := io.ReadAll(br)
	require.NoError(t, err)
	require.Contains(t, string(rest), "lo")
	require.Contains(t, string(rest), "[DONE]")
	require.NoError(t, resp.Body.Close())
	require.Equal(t, []doneCall{{"r0", 2}}, done.all(), "two content chunks, [DONE] not counted")
	require.Equal(t, 0, f.pool.InFlight())
}

// Which failures are retried, and where, is the pool's retry rule: TestRetryRules and
// TestRetryMaxTriesAndReplica (retry_test.go).

func TestDoDoesNotRetry(t *testing.T) {
	for _, status := range []int{http.StatusNotImplemented, http.StatusGatewayTimeout} {
		t.Run(fmt.Sprintf("%d from replica", status), func(t *testing.T) {
			var hits atomic.Int32
			bad := replicaServer(t, func(w http.ResponseWriter, r *http.Request) {
				http.Error(w, "boom", status)
			})
			good := replicaServer(t, func(w http.ResponseWriter, r *http.Request) { hits.Add(1) })
			f := newFixture(t, testConfig(bad.URL, good.URL), preferring("r0"), nil)
			resp, err := f.pool.Do(context.Background(), &ForwardRequest{Path: "/"})
			require.NoError(t, err)
			require.Equal(t, status, resp.Status)
			require.NoError(t, resp.Body.Close())
			require.Zero(t, hits.Load())
			require.Equal(t, 1.0, f.outcomes(t, "r0", "error_status"))
		})
	}

	t.Run("only one replica: its 500 passes through", func(t *testing.T) {
		bad := replicaServer(t, func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "boom", http.StatusInternalServerError)
		})
		f := newFixture(t, testConfig(bad.URL), &stubPicker{}, nil)
		resp, err := f.pool.Do(context.Background(), &ForwardRequest{Path: "/"})
		require.NoError(t, err)
		require.Equal(t, http.StatusInternalServerError, resp.Status)
		require.NoError(t, resp.Body.Close())
		require.False(t, resp.Retried)
		require.Equal(t, 1.0, f.outcomes(t, "r0", "error_status"))
	})

	t.Run("only one replica: its 503 passes through", func(t *testing.T) {
		bad := replicaServer(t, func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "overloaded", http.StatusServiceUnavailable)
		})
		f := newFixture(t, testConfig(bad.URL), &stubPicker{}, nil)
		resp, err := f.pool.Do(context.Background(), &ForwardRequest{Path: "/"})
		require.NoError(t, err)
		require.Equal(t, http.StatusServiceUnavailable, resp.Status)
		b, _ := io.ReadAll(resp.Body)
		require.Contains(t, string(b), "overloaded")
		require.NoError(t, resp.Body.Close())
		require.False(t, resp.Retried)
	})

	t.Run("only one replica: connect error", func(t *testing.T) {
		f := newFixture(t, testConfig(deadURL(t)), &stubPicker{}, nil)
		_, err := f.pool.Do(context.Background(), &ForwardRequest{Path: "/"})
		var ue *UpstreamError
		require.ErrorAs(t, err, &ue)
		require.Equal(t, "r0", ue.Replica)
		require.NotErrorIs(t, err, ErrUpstreamTimeout)
		require.Equal(t, 1.0, f.outcomes(t, "r0", "connect_error"))
		require.Equal(t, 0, f.pool.InFlight())
	})

	t.Run("after the first byte", func(t *testing.T) {
		var hits atomic.Int32
		broken := replicaServer(t, func(w http.ResponseWriter, r *http.Request) {
			sseHeaders(w)
			flushEvent(w, `{"n":1}`)
			closeConn(t, w)
		})
		good := replicaServer(t, func(w http.ResponseWriter, r *http.Request) { hits.Add(1) })
		f := newFixture(t, testConfig(broken.URL, good.URL), preferring("r0"), nil)

		resp, err := f.pool.Do(context.Background(), &ForwardRequest{Path: "/v1/chat/completions"})
		require.NoError(t, err)
		require.Equal(t, "r0", resp.ReplicaID)
		b, err := io.ReadAll(resp.Body)
		require.Contains(t, string(b), `{"n":1}`)
		var ue *UpstreamError
		require.ErrorAs(t, err, &ue)
		require.NotErrorIs(t, err, ErrUpstreamTimeout)
		require.NoError(t, resp.Body.Close())

		require.Zero(t, hits.Load())
		require.Equal(t, 1.0, f.outcomes(t, "r0", "stream_error"))
		require.Equal(t, 1, f.pool.Replicas()[0].ConsecutiveFailures)
	})

	t.Run("first-byte timeout, only one replica", func(t *testing.T) {
		slow := replicaServer(t, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
		cfg := testConfig(slow.URL)
		cfg.Timeouts.FirstByte = Duration(50 * time.Millisecond)
		f := newFixture(t, cfg, &stubPicker{}, nil)

		_, err := f.pool.Do(context.Background(), &ForwardRequest{Path: "/"})
		require.ErrorIs(t, err, ErrUpstreamTimeout)
		var ue *UpstreamError
		require.ErrorAs(t, err, &ue)
		require.Equal(t, 1.0, f.outcomes(t, "r0", "timeout"))
		require.Equal(t, 0, f.pool.InFlight())
	})

	t.Run("first-byte timeout when the request's deadline has passed", func(t *testing.T) {
		var hits atomic.Int32
		slow := replicaServer(t, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
		good := replicaServer(t, func(w http.ResponseWriter, r *http.Request) { hits.Add(1) })
		cfg := testConfig(slow.URL, good.URL)
		cfg.Timeouts.FirstByte = Duration(time.Minute)
		f := newFixture(t, cfg, preferring("r0"), nil)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, err := f.pool.Do(ctx, &ForwardRequest{Path: "/"})
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Zero(t, hits.Load(), "no time is left for another replica")
	})
}

func TestAllReplicasDown(t *testing.T) {
	f := newFixture(t, testConfig(deadURL(t), deadURL(t)), preferring("r0", "r1"), nil)
	ctx := context.Background()
	// Each request tries both (one retry); both fail and count toward
	// ejection (threshold 3).
	for range 3 {
		_, err := f.pool.Do(ctx, &ForwardRequest{Path: "/"})
		var ue *UpstreamError
		require.ErrorAs(t, err, &ue)
		require.Equal(t, "r1", ue.Replica, "the error names the last replica tried")
	}
	require.False(t, f.pool.Healthy())
	_, err := f.pool.Do(ctx, &ForwardRequest{Path: "/"})
	require.ErrorIs(t, err, ErrNoHealthyReplica)
	require.Equal(t, 0, f.pool.InFlight())
}

func TestPassiveEjectionAndRecovery(t *testing.T) {
	var status atomic.Int32
	status.Store(http.StatusInternalServerError)
	srv := replicaServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(int(status.Load()))
	})
	cfg := testConfig(srv.URL)
	cfg.PassiveEjection = PassiveEjectionConfig{ConsecutiveFailures: 3, Cooldown: Duration(10 * time.Second)}
	f := newFixture(t, cfg, &stubPicker{}, nil)
	p, ctx := f.pool, context.Background()
	do := func() (int, error) {
		resp, err := p.Do(ctx, &ForwardRequest{Path: "/"})
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.Status, nil
	}
	ejections := func() float64 {
		return f.metric(t, "triage_upstream_ejections_total", map[string]string{"replica": "r0"})
	}

	for i := range 3 {
		require.Equal(t, StateHealthy, p.Replicas()[0].State, "before failure %d", i+1)
		code, err := do()
		require.NoError(t, err)
		require.Equal(t, 500, code)
	}
	st := p.Replicas()[0]
	require.Equal(t, StateEjected, st.State)
	require.Equal(t, f.clock.now().Add(10*time.Second), st.EjectedUntil)
	require.Equal(t, 1.0, ejections())
	require.False(t, p.Healthy())
	_, err := do()
	require.ErrorIs(t, err, ErrNoHealthyReplica)

	// Cooldown over: back on probation, where one failure ejects again.
	f.clock.advance(10 * time.Second)
	require.True(t, p.Healthy())
	_, err = do()
	require.NoError(t, err)
	require.Equal(t, StateEjected, p.Replicas()[0].State)
	require.Equal(t, 2.0, ejections())

	// A success on probation clears the record: one failure no longer ejects.
	f.clock.advance(10 * time.Second)
	status.Store(http.StatusOK)
	code, err := do()
	require.NoError(t, err)
	require.Equal(t, 200, code)
	require.Equal(t, 0, p.Replicas()[0].ConsecutiveFailures)
	status.Store(http.StatusBadGateway)
	_, err = do()
	require.NoError(t, err)
	require.Equal(t, StateHealthy, p.Replicas()[0].State)
	require.Equal(t, 1, p.Replicas()[0].ConsecutiveFailures)
	require.Equal(t, 2.0, ejections())
}

func TestRecordPassiveDoesNotExtendCooldown(t *testing.T) {
	r := &replica{}
	t0 := time.Unix(1000, 0)
	require.False(t, r.recordPassive(false, t0, 2, time.Minute))
	require.True(t, r.recordPassive(false, t0, 2, time.Minute))
	// Requests already in flight fail while ejected: no new ejection.
	require.False(t, r.recordPassive(false, t0.Add(30*time.Second), 2, time.Minute))
	require.Equal(t, t0.Add(time.Minute), r.ejectedUntil)
	// Disabled when the threshold is 0.
	r2 := &replica{}
	for range 10 {
		require.False(t, r2.recordPassive(false, t0, 0, time.Minute))
	}
}

func TestClientCancelPropagates(t *testing.T) {
	t.Run("before headers", func(t *testing.T) {
		arrived, observed := make(chan struct{}), make(chan struct{})
		srv := replicaServer(t, func(w http.ResponseWriter, r *http.Request) {
			close(arrived)
			<-r.Context().Done()
			close(observed)
		})
		f := newFixture(t, testConfig(srv.URL), &stubPicker{}, nil)
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			_, err := f.pool.Do(ctx, &ForwardRequest{Path: "/"})
			errc <- err
		}()
		<-arrived
		cancel()
		require.ErrorIs(t, <-errc, context.Canceled)
		<-observed
		require.Equal(t, 0, f.pool.InFlight())
		require.Equal(t, 1.0, f.outcomes(t, "r0", "canceled"))
		require.Equal(t, 0, f.pool.Replicas()[0].ConsecutiveFailures, "a client leaving is not the replica's fault")
	})

	t.Run("mid-stream", func(t *testing.T) {
		observed := make(chan struct{})
		srv := replicaServer(t, func(w http.ResponseWriter, r *http.Request) {
			sseHeaders(w)
			flushEvent(w, `{"n":1}`)
			<-r.Context().Done()
			close(observed)
		})
		f := newFixture(t, testConfig(srv.URL), &stubPicker{}, nil)
		ctx, cancel := context.WithCancel(context.Background())
		resp, err := f.pool.Do(ctx, &ForwardRequest{Path: "/"})
		require.NoError(t, err)
		br := bufio.NewReader(resp.Body)
		_, err = readEvent(br)
		require.NoError(t, err)
		cancel()
		<-observed
		_, err = io.ReadAll(br)
		require.ErrorIs(t, err, context.Canceled)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, 0, f.pool.InFlight())
		require.Equal(t, 1.0, f.outcomes(t, "r0", "canceled"))
	})

	t.Run("close before the end", func(t *testing.T) {
		observed := make(chan struct{})
		srv := replicaServer(t, func(w http.ResponseWriter, r *http.Request) {
			sseHeaders(w)
			flushEvent(w, `{"n":1}`)
			<-r.Context().Done()
			close(observed)
		})
		f := newFixture(t, testConfig(srv.URL), &stubPicker{}, nil)
		resp, err := f.pool.Do(context.Background(), &ForwardRequest{Path: "/"})
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		<-observed
		require.Equal(t, 0, f.pool.InFlight())
		require.Equal(t, 1.0, f.outcomes(t, "r0", "canceled"))
	})

	t.Run("already cancelled", func(t *testing.T) {
		f := newFixture(t, testConfig("http://127.0.0.1:1"), &stubPicker{}, nil)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := f.pool.Do(ctx, &ForwardRequest{Path: "/"})
		require.ErrorIs(t, err, context.Canceled)
	})
}

func TestStreamIdleTimeout(t *testing.T) {
	observed := make(chan struct{})
	srv := replicaServer(t, func(w http.ResponseWriter, r *http.Request) {
		sseHeaders(w)
		flushEvent(w, `{"n":1}`)
		<-r.Context().Done() // stalls until the gateway gives up
		close(observed)
	})
	cfg := testConfig(srv.URL)
	cfg.Timeouts.StreamIdle = Duration(50 * time.Millisecond)
	var done doneLog
	f := newFixture(t, cfg, &stubPicker{done: done.record}, nil)

	resp, err := f.pool.Do(context.Background(), &ForwardRequest{Path: "/"})
	require.NoError(t, err)
	br := bufio.NewReader(resp.Body)
	ev, err := readEvent(br)
	require.NoError(t, err)
	require.Contains(t, ev, `{"n":1}`)
	_, err = io.ReadAll(br)
	require.ErrorIs(t, err, ErrUpstreamTimeout)
	var ue *UpstreamError
	require.ErrorAs(t, err, &ue)
	<-observed
	require.NoError(t, resp.Body.Close())

	require.Equal(t, 1.0, f.outcomes(t, "r0", "timeout"))
	require.Equal(t, 1, f.pool.Replicas()[0].ConsecutiveFailures)
	require.Equal(t, []doneCall{{"r0", 1}}, done.all())
	require.Equal(t, 0, f.pool.InFlight())
}

func TestSetOutputTokensOverrides(t *testing.T) {
	srv := replicaServer(t, func(w http.ResponseWriter, r *http.Request) {
		sseHeaders(w)
		flushEvent(w, `{"n":1}`)
	})
	var done doneLog
	f := newFixture(t, testConfig(srv.URL), &stubPicker{done: done.record}, nil)
	resp, err := f.pool.Do(context.Background(), &ForwardRequest{Path: "/"})
	require.NoError(t, err)
	_, err = io.ReadAll(resp.Body)
	require.NoError(t, err)
	resp.SetOutputTokens(42)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, []doneCall{{"r0", 42}}, done.all())
}

func TestDoRejectsBadInput(t *testing.T) {
	f := newFixture(t, testConfig("http://127.0.0.1:1"), &stubPicker{}, nil)
	ctx := context.Background()
	_, err := f.pool.Do(ctx, &ForwardRequest{Path: "v1/models"})
	require.ErrorContains(t, err, "must start with")
	_, err = f.pool.Do(ctx, &ForwardRequest{Method: "GE T", Path: "/"})
	require.ErrorContains(t, err, "invalid method")
	_, err = f.pool.Do(ctx, &ForwardRequest{Path: "/", Body: []byte(`[1]`), SetModel: true})
	require.ErrorIs(t, err, ErrInvalidBody)
	require.Equal(t, 0, f.pool.InFlight())
}

func TestUpstreamErrorWraps(t *testing.T) {
	cause := errors.New("connection reset")
	err := error(&UpstreamError{Pool: "slow", Replica: "a", Err: cause})
	require.ErrorIs(t, err, cause)
	require.Equal(t, "upstream slow/a: connection reset", err.Error())
}

// A replica that answers "busy" (429, or 503 with Retry-After) is passed over for another,
// and never ejected for it: overload is not failure. A 503 without Retry-After still counts,
// and under the default retry rule is passed on (a proxy in front of a replica answers it
// after a reset, so it may follow an execution).
func TestBusyAnswersAreRetriedAndNeverEject(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		header string
		eject  bool
	}{
		{"429", http.StatusTooManyRequests, "", false},
		{"503 with Retry-After", http.StatusServiceUnavailable, "1", false},
		{"503 without Retry-After", http.StatusServiceUnavailable, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var busyHits atomic.Int64
			busySrv := replicaServer(t, func(w http.ResponseWriter, r *http.Request) {
				busyHits.Add(1)
				if tc.header != "" {
					w.Header().Set("Retry-After", tc.header)
				}
				w.WriteHeader(tc.status)
			})
			okSrv := replicaServer(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{}`) })
			cfg := testConfig(busySrv.URL, okSrv.URL)
			cfg.PassiveEjection.ConsecutiveFailures = 1
			f := newFixture(t, cfg, &stubPicker{pick: func(*policy.Request, []policy.Candidate) int { return 0 }}, nil)
			for range 5 {
				resp, err := f.pool.Do(context.Background(), &ForwardRequest{Method: http.MethodPost, Path: "/v1/completions", Body: []byte(`{}`)})
				require.NoError(t, err)
				if tc.eject {
					require.Equal(t, http.StatusServiceUnavailable, resp.Status, "not retried by default")
					require.Equal(t, "r0", resp.ReplicaID)
					resp.Body.Close()
					break
				}
				require.Equal(t, http.StatusOK, resp.Status, "answered by the other replica")
				require.Equal(t, "r1", resp.ReplicaID)
				require.True(t, resp.Retried)
				resp.Body.Close()
			}
			st := f.pool.Replicas()
			if tc.eject {
				require.Equal(t, StateEjected, st[0].State, "a plain 503 is a failure")
				return
			}
			require.Equal(t, StateHealthy, st[0].State, "busy is not broken")
			require.EqualValues(t, 5, busyHits.Load())
			require.Zero(t, f.metric(t, "triage_upstream_ejections_total", map[string]string{"replica": "r0"}))
		})
	}
}

// When every replica is busy the busy answer stands, passed to the caller, and still ejects
// nobody.
func TestBusyAnswerStandsWhenNoOtherReplica(t *testing.T) {
	srv := replicaServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "2")
		w.WriteHeader(http.StatusTooManyRequests)
	})
	cfg := testConfig(srv.URL)
	cfg.PassiveEjection.ConsecutiveFailures = 1
	f := newFixture(t, cfg, policy.NewLeastRequest(), nil)
	for range 3 {
		resp, err := f.pool.Do(context.Background(), &ForwardRequest{Method: http.MethodPost, Path: "/v1/completions", Body: []byte(`{}`)})
		require.NoError(t, err)
		require.Equal(t, http.StatusTooManyRequests, resp.Status)
		require.Equal(t, "2", resp.Header.Get("Retry-After"))
		resp.Body.Close()
	}
	require.True(t, f.pool.Healthy())
	require.Equal(t, 3.0, f.outcomes(t, "r0", "busy"))
}

// passive_ejection.slow_first_byte lets passive health see a replica that answers, but late:
// its answers are delivered and count as failures until it is ejected.
func TestSlowFirstByteCountsTowardEjection(t *testing.T) {
	srv := replicaServer(t, func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(60 * time.Millisecond) // a slow replica: answers, but after slow_first_byte
		io.WriteString(w, `{}`)
	})
	cfg := testConfig(srv.URL)
	cfg.PassiveEjection.ConsecutiveFailures = 2
	cfg.PassiveEjection.SlowFirstByte = Duration(20 * time.Millisecond)
	f := newFixture(t, cfg, policy.NewLeastRequest(), nil)
	for i := range 2 {
		resp, err := f.pool.Do(context.Background(), &ForwardRequest{Method: http.MethodPost, Path: "/v1/completions", Body: []byte(`{}`)})
		require.NoError(t, err, "attempt %d", i)
		require.Equal(t, http.StatusOK, resp.Status, "the slow answer is still delivered")
		resp.Body.Close()
	}
	require.Equal(t, StateEjected, f.pool.Replicas()[0].State)
}
