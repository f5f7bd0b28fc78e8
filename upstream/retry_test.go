package upstream

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// resetWhileWritingURL is a server that resets each connection once the request has begun
// to arrive, having read one byte of it. (Reset at once, the connection fails in the dial.)
func resetWhileWritingURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() }) // ends the accept loop below
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Read(make([]byte, 1))
			c.(*net.TCPConn).SetLinger(0)
			c.Close()
		}
	}()
	return "http://" + ln.Addr().String()
}

func statusServer(status int, retryAfter string) func(t *testing.T) string {
	return func(t *testing.T) string {
		return replicaServer(t, func(w http.ResponseWriter, r *http.Request) {
			io.ReadAll(r.Body)
			if retryAfter != "" {
				w.Header().Set("Retry-After", retryAfter)
			}
			http.Error(w, "no", status)
		}).URL
	}
}

// TestRetryRules: each failure a try can end in, from a real server that fails that way, is
// retried on the other replica exactly when the pool's retry.on lists it, and the default
// rule lists only those that say the replica did not execute the request.
func TestRetryRules(t *testing.T) {
	small := []byte(`{"model":"x","prompt":"p"}`)
	// Larger than the loopback socket buffers: a replica that reads none of it makes the
	// write itself fail.
	large := []byte(`{"model":"x","prompt":"` + strings.Repeat("a", 16<<20) + `"}`)
	for _, tc := range []struct {
		name    string
		first   func(t *testing.T) string // r0's URL; r1 answers 200
		body    []byte
		on      RetryOn
		byDflt  bool   // retried under DefaultRetryConfig
		outcome string // r0's triage_upstream_requests_total outcome when not retried
	}{
		{"connection refused", deadURL, small, RetryDialError, true, "connect_error"},
		{"reset while the request is written", resetWhileWritingURL, large, RetryResetBeforeWrite, true, "connect_error"},
		{"reset after reading the body", func(t *testing.T) string {
			return replicaServer(t, func(w http.ResponseWriter, r *http.Request) {
				io.ReadAll(r.Body)
				closeConn(t, w)
			}).URL
		}, small, RetryResetBeforeHeaders, false, "connect_error"},
		// The request was already in the socket buffers: from the gateway this cannot be told
		// from a replica that read it, so it is not retried by default either.
		{"closed without reading a small request", func(t *testing.T) string {
			return replicaServer(t, func(w http.ResponseWriter, r *http.Request) { closeConn(t, w) }).URL
		}, small, RetryResetBeforeHeaders, false, "connect_error"},
		{"first-byte timeout", func(t *testing.T) string {
			return replicaServer(t, func(w http.ResponseWriter, r *http.Request) {
				io.ReadAll(r.Body) // net/http notices the client leaving only once the body is read
				<-r.Context().Done()
			}).URL
		}, small, RetryFirstByteTimeout, false, "timeout"},
		{"429", statusServer(http.StatusTooManyRequests, ""), small, RetryStatus429, true, "busy"},
		{"429 with Retry-After", statusServer(http.StatusTooManyRequests, "3"), small, RetryStatus429, true, "busy"},
		{"503 with Retry-After", statusServer(http.StatusServiceUnavailable, "1"), small, RetryStatus503RetryAfter, true, "busy"},
		{"503", statusServer(http.StatusServiceUnavailable, ""), small, RetryStatus503, false, "error_status"},
		{"500", statusServer(http.StatusInternalServerError, ""), small, RetryStatus500, false, "error_status"},
		{"502", statusServer(http.StatusBadGateway, ""), small, RetryStatus502, false, "error_status"},
	} {
		for _, rule := range []string{"default", "listed", "not listed"} {
			t.Run(tc.name+"/"+rule, func(t *testing.T) {
				var hits atomic.Int32
				var model atomic.Value
				good := replicaServer(t, func(w http.ResponseWriter, r *http.Request) {
					hits.Add(1)
					var m struct{ Model string }
					json.NewDecoder(r.Body).Decode(&m)
					model.Store(m.Model)
					io.WriteString(w, `{"ok":true}`)
				})
				cfg := testConfig(tc.first(t), good.URL)
				cfg.Replicas[1].Model = "r1-model"
				if tc.on == RetryFirstByteTimeout {
					cfg.Timeouts.FirstByte = Duration(200 * time.Millisecond)
				}
				want := tc.byDflt
				switch rule {
				case "listed":
					cfg.Retry.On, want = []RetryOn{tc.on}, true
				case "not listed":
					cfg.Retry.On, want = slices.DeleteFunc(slices.Clone(retryOns[:]), func(o RetryOn) bool { return o == tc.on }), false
				}
				var done doneLog
				picker := preferring("r0", "r1")
				picker.done = done.record
				f := newFixture(t, cfg, picker, nil)

				resp, err := f.pool.Do(context.Background(), &ForwardRequest{
					Method: http.MethodPost, Path: "/v1/completions", Body: tc.body, SetModel: true,
				})
				tries := func(try, outcome string) float64 {
					return f.metric(t, "triage_upstream_tries_total", map[string]string{"pool": "test", "try": try, "outcome": outcome})
				}
				require.Equal(t, 1.0, tries("1", string(tc.on)), "the first try's failure is named")
				if want {
					require.NoError(t, err)
					require.Equal(t, "r1", resp.ReplicaID)
					require.True(t, resp.Retried)
					require.Equal(t, http.StatusOK, resp.Status)
					require.NoError(t, resp.Body.Close())
					require.EqualValues(t, 1, hits.Load())
					require.Equal(t, "r1-model", model.Load(), "the retry replays the body with its replica's model")
					require.Equal(t, 1.0, tries("2", "answered"))
					require.Equal(t, 1.0, f.outcomes(t, "r0", "retried"))
					require.Equal(t, 1.0, f.metric(t, "triage_upstream_retries_total", map[string]string{"pool": "test"}))
					require.Equal(t, []doneCall{{"r0", 0}, {"r1", 0}}, done.all(), "every pick gets its Done")
				} else {
					if err == nil {
						require.Equal(t, "r0", resp.ReplicaID, "the failed answer passes through")
						require.False(t, resp.Retried)
						require.NoError(t, resp.Body.Close())
					} else {
						var ue *UpstreamError
						require.ErrorAs(t, err, &ue)
						require.Equal(t, "r0", ue.Replica)
					}
					require.Zero(t, hits.Load(), "not sent again")
					require.Zero(t, tries("2", "answered"))
					require.Equal(t, 1.0, f.outcomes(t, "r0", tc.outcome))
				}
				require.Equal(t, 0, f.pool.InFlight())
			})
		}
	}
}

// TestRetryMaxTriesAndReplica: max_tries bounds the tries, "other" never tries a replica
// twice (and stops when none is left), "any" may try the same one again.
func TestRetryMaxTriesAndReplica(t *testing.T) {
	busy := statusServer(http.StatusTooManyRequests, "1")

	t.Run("other: each replica at most once, the last answer stands", func(t *testing.T) {
		cfg := testConfig(busy(t), busy(t), busy(t))
		cfg.Retry.MaxTries = 5
		f := newFixture(t, cfg, preferring("r0", "r1", "r2"), nil)
		resp, err := f.pool.Do(context.Background(), &ForwardRequest{Method: http.MethodPost, Path: "/v1/completions", Body: []byte(`{}`)})
		require.NoError(t, err)
		require.Equal(t, http.StatusTooManyRequests, resp.Status)
		require.Equal(t, "r2", resp.ReplicaID)
		require.True(t, resp.Retried)
		resp.Body.Close()
		for _, try := range []string{"1", "2", "3"} {
			require.Equal(t, 1.0, f.metric(t, "triage_upstream_tries_total", map[string]string{"try": try, "outcome": "status_429"}))
		}
		require.Zero(t, f.metric(t, "triage_upstream_tries_total", map[string]string{"try": "4"}))
	})

	t.Run("max_tries bounds the tries", func(t *testing.T) {
		var hits atomic.Int32
		good := replicaServer(t, func(w http.ResponseWriter, r *http.Request) { hits.Add(1) })
		cfg := testConfig(busy(t), busy(t), good.URL)
		cfg.Retry.MaxTries = 2
		f := newFixture(t, cfg, preferring("r0", "r1", "r2"), nil)
		resp, err := f.pool.Do(context.Background(), &ForwardRequest{Method: http.MethodPost, Path: "/v1/completions", Body: []byte(`{}`)})
		require.NoError(t, err)
		require.Equal(t, "r1", resp.ReplicaID, "the second try's answer stands")
		require.Equal(t, http.StatusTooManyRequests, resp.Status)
		resp.Body.Close()
		require.Zero(t, hits.Load())
	})

	t.Run("max_tries 1 never retries", func(t *testing.T) {
		cfg := testConfig(deadURL(t), busy(t))
		cfg.Retry.MaxTries = 1
		f := newFixture(t, cfg, preferring("r0", "r1"), nil)
		_, err := f.pool.Do(context.Background(), &ForwardRequest{Method: http.MethodPost, Path: "/v1/completions", Body: []byte(`{}`)})
		var ue *UpstreamError
		require.ErrorAs(t, err, &ue)
		require.Equal(t, "r0", ue.Replica)
	})

	t.Run("any: the same replica again", func(t *testing.T) {
		var n atomic.Int32
		flaky := replicaServer(t, func(w http.ResponseWriter, r *http.Request) {
			if n.Add(1) == 1 {
				w.Header().Set("Retry-After", "1")
				w.WriteHeader(http.StatusTooManyRequests)
				return
			}
			io.WriteString(w, `{}`)
		})
		cfg := testConfig(flaky.URL)
		cfg.Retry.Replica = RetryReplicaAny
		f := newFixture(t, cfg, &stubPicker{}, nil)
		resp, err := f.pool.Do(context.Background(), &ForwardRequest{Method: http.MethodPost, Path: "/v1/completions", Body: []byte(`{}`)})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.Status)
		require.True(t, resp.Retried)
		resp.Body.Close()
		require.EqualValues(t, 2, n.Load())
		require.Equal(t, 0, f.pool.InFlight())
	})

	t.Run("no retry once the caller has gone", func(t *testing.T) {
		var hits atomic.Int32
		ctx, cancel := context.WithCancel(context.Background())
		leaving := replicaServer(t, func(w http.ResponseWriter, r *http.Request) {
			cancel()
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
		})
		good := replicaServer(t, func(w http.ResponseWriter, r *http.Request) { hits.Add(1) })
		f := newFixture(t, testConfig(leaving.URL, good.URL), preferring("r0", "r1"), nil)
		resp, err := f.pool.Do(ctx, &ForwardRequest{Method: http.MethodPost, Path: "/v1/completions", Body: []byte(`{}`)})
		if err == nil {
			resp.Body.Close()
		}
		require.Zero(t, hits.Load())
	})
}

func TestRetryConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*RetryConfig)
		want string // "" means valid
	}{
		{"default", func(*RetryConfig) {}, ""},
		{"nothing retried", func(c *RetryConfig) { c.On = nil }, ""},
		{"every failure", func(c *RetryConfig) { c.On = retryOns[:] }, ""},
		{"max_tries 0", func(c *RetryConfig) { c.MaxTries = 0 }, "pool.retry.max_tries: must be 1 (no retries) to 5, got 0"},
		{"max_tries 6", func(c *RetryConfig) { c.MaxTries = 6 }, "pool.retry.max_tries"},
		{"unknown failure", func(c *RetryConfig) { c.On = []RetryOn{RetryDialError, "status_504"} }, `pool.retry.on[1]: unknown failure "status_504"`},
		{"listed twice", func(c *RetryConfig) { c.On = []RetryOn{RetryDialError, RetryDialError} }, `pool.retry.on[1]: "dial_error" listed twice`},
		{"replica", func(c *RetryConfig) { c.Replica = "same" }, `pool.retry.replica: must be "other" or "any", got "same"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig("http://127.0.0.1:1")
			tc.edit(&cfg.Retry)
			err := cfg.Validate()
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// The tries metric's label values are the fixed set its help text names.
func TestTryOutcomeNames(t *testing.T) {
	var names []string
	for o := range numTryOutcomes {
		names = append(names, o.String())
	}
	require.Equal(t, []string{"dial_error", "reset_before_write", "reset_before_headers", "first_byte_timeout",
		"status_429", "status_503_retry_after", "status_503", "status_500", "status_502",
		"answered", "canceled", "invalid_request"}, names)
}
