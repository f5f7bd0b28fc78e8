package load

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestClosedLoopLimit(t *testing.T) {
	var calls atomic.Int64
	seen := make(map[int64]bool)
	ss, _ := ClosedLoop{Workers: 4, Duration: time.Minute, Limit: 50}.Run(context.Background(), func(_ context.Context, _ int, seq int64) Sample {
		calls.Add(1)
		return Sample{Status: 200, Latency: time.Duration(seq)}
	})
	require.Len(t, ss, 50)
	require.EqualValues(t, 50, calls.Load())
	for _, s := range ss {
		seen[int64(s.Latency)] = true
	}
	require.Len(t, seen, 50, "every sequence number used once")
}

func TestOpenLoopDropsBeyondInFlight(t *testing.T) {
	release := make(chan struct{})
	var started atomic.Int64
	done := make(chan OpenLoopResult, 1)
	go func() {
		done <- OpenLoop{Rate: 2000, Duration: 100 * time.Millisecond, MaxInFlight: 3, Seed: 1}.Run(context.Background(), func(ctx context.Context, _ int64) Sample {
			started.Add(1)
			<-release
			return Sample{Status: 200}
		})
	}()
	require.Eventually(t, func() bool { return started.Load() == 3 }, 5*time.Second, time.Millisecond)
	// Past the arrival window, still no fourth request: the rest were dropped.
	require.Never(t, func() bool { return started.Load() > 3 }, 150*time.Millisecond, 5*time.Millisecond)
	close(release)
	res := <-done
	require.Len(t, res.Samples, 3, "never more than the in-flight bound")
	require.Equal(t, res.Offered-3, res.Dropped)
	require.Greater(t, res.Offered, 50)
}

func TestPostJSONAndStatusCounts(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		require.Equal(t, "application/json", r.Header.Get("Content-Type"))
		if r.URL.Path == "/full" {
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.Header().Set("x-router-latency", "0.734")
		w.Write([]byte(`{"ok":true}`))
	}))
	defer srv.Close()
	c := NewClient(2, 5*time.Second)
	ok := PostJSON(context.Background(), c, srv.URL+"/x", []byte(`{}`), true)
	require.True(t, ok.OK())
	require.Equal(t, `{"ok":true}`, string(ok.Body))
	v, has := HeaderMillis(ok.Header, "x-router-latency")
	require.True(t, has)
	require.Equal(t, 0.734, v)
	full := PostJSON(context.Background(), c, srv.URL+"/full", []byte(`{}`), false)
	require.False(t, full.OK())
	down := Sample{Err: "connection refused"}
	require.Equal(t, map[string]int{"200": 1, "429": 1, "error": 1}, StatusCounts([]Sample{ok, full, down}))
	require.Equal(t, "status 429", FirstError([]Sample{ok, full}))
}

// TestClosedLoopRamp checks that worker w sends nothing before w·Ramp/Workers
// and that every worker joins within the run.
func TestClosedLoopRamp(t *testing.T) {
	const workers = 4
	ramp := 200 * time.Millisecond
	pace := time.NewTicker(time.Millisecond) // paces the workers so the run stays small
	defer pace.Stop()
	ss, _ := ClosedLoop{Workers: workers, Ramp: ramp, Duration: 400 * time.Millisecond}.Run(context.Background(), func(ctx context.Context, w int, _ int64) Sample {
		select {
		case <-pace.C:
		case <-ctx.Done():
		}
		return Sample{Status: w} // the worker, to check its start below
	})
	first := map[int]time.Duration{}
	for _, s := range ss {
		if _, ok := first[s.Status]; !ok {
			first[s.Status] = s.At // samples come in send order
		}
	}
	require.Len(t, first, workers, "every worker joined")
	for w, at := range first {
		require.GreaterOrEqual(t, at, ramp*time.Duration(w)/workers, "worker %d started early", w)
	}
}

func TestPostStream(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		require.Equal(t, "text/event-stream", r.Header.Get("Accept"))
		switch r.URL.Path {
		case "/busy":
			w.WriteHeader(http.StatusTooManyRequests)
		case "/cut":
			w.Write([]byte("data: {}\n\n"))
		default:
			w.Write([]byte("data: {}\n\ndata: {}\n\ndata: [DONE]\n\n"))
		}
	}))
	defer srv.Close()
	c := NewClient(1, 5*time.Second)
	ctx := context.Background()

	s, st := PostStream(ctx, c, srv.URL+"/ok", []byte(`{}`))
	require.True(t, s.OK(), s.Err)
	require.Equal(t, 2, st.Events)
	require.True(t, st.Done)
	require.Equal(t, st.E2E, s.Latency)

	s, st = PostStream(ctx, c, srv.URL+"/cut", []byte(`{}`))
	require.False(t, s.OK())
	require.Equal(t, "stream ended without [DONE]", s.Err)
	require.Equal(t, 1, st.Events)

	s, st = PostStream(ctx, c, srv.URL+"/busy", []byte(`{}`))
	require.Equal(t, http.StatusTooManyRequests, s.Status)
	require.Zero(t, st)
}
