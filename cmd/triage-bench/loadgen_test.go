package main

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
	ss, _ := closedLoop(context.Background(), 4, time.Minute, 50, func(_ context.Context, _ int, seq int64) Sample {
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
	done := make(chan openLoopResult, 1)
	go func() {
		done <- openLoop(context.Background(), 2000, 100*time.Millisecond, 3, 1, func(ctx context.Context, _ int64) Sample {
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
	c := newClient(2, 5*time.Second)
	ok := postJSON(context.Background(), c, srv.URL+"/x", []byte(`{}`), true)
	require.True(t, isOK(ok))
	require.Equal(t, `{"ok":true}`, string(ok.Body))
	v, has := headerMillis(ok.Header, "x-router-latency")
	require.True(t, has)
	require.Equal(t, 0.734, v)
	full := postJSON(context.Background(), c, srv.URL+"/full", []byte(`{}`), false)
	require.False(t, isOK(full))
	down := Sample{Err: "connection refused"}
	require.Equal(t, map[string]int{"200": 1, "429": 1, "error": 1}, statusCounts([]Sample{ok, full, down}))
	require.Equal(t, "status 429", firstError([]Sample{ok, full}))
}

func TestTextSourceDistinct(t *testing.T) {
	rows := []DollyRow{
		{Instruction: "a", Category: "classification"},
		{Instruction: "b", Context: "doc", Category: "summarization"},
		{Instruction: "c", Category: "open_qa"}, // not a target category
	}
	src, err := newTextSource(rows, 1, true)
	require.NoError(t, err)
	seen := map[classifyItem]bool{}
	for range 6 {
		it := src.take()
		require.False(t, seen[it], "repeated %v", it)
		seen[it] = true
		require.NotEqual(t, "c", it.Text)
	}
	cyc, err := newTextSource(rows, 1, false)
	require.NoError(t, err)
	require.Equal(t, cyc.item(0), cyc.item(2), "without distinct, texts cycle")
	require.JSONEq(t, `{"text":"b","context":"doc"}`, string(classifyItem{Text: "b", Context: "doc"}.body()))
	require.JSONEq(t, `{"text":"a"}`, string(classifyItem{Text: "a"}.body()))
}
