package load

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// BenchmarkClosedLoopPostJSON measures the load generator's own ceiling:
// 8 workers posting to a server that answers a fixed small JSON at once.
// A gateway benchmark run with this client cannot show more req/s than this
// on the same machine.
func BenchmarkClosedLoopPostJSON(b *testing.B) {
	body := []byte(`{"label":"0","p_slow":0.1234,"reason":"fast_model","cache":"hit"}`)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(body)
	}))
	defer srv.Close()
	const workers = 8
	c := NewClient(workers, 5*time.Second)
	defer c.CloseIdleConnections()
	b.ReportAllocs()
	b.ResetTimer()
	ss, wall := ClosedLoop{Workers: workers, Duration: time.Hour, Limit: b.N}.Run(context.Background(), func(ctx context.Context, _ int, _ int64) Sample {
		return PostJSON(ctx, c, srv.URL, []byte(`{"text":"x"}`), false)
	})
	b.StopTimer()
	if len(ss) != b.N || FirstError(ss) != "" {
		b.Fatalf("%d of %d samples, first error %q", len(ss), b.N, FirstError(ss))
	}
	b.ReportMetric(float64(b.N)/wall.Seconds(), "req/s")
}
