package promtext

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParsePromText(t *testing.T) {
	in := `# HELP process_resident_memory_bytes Resident memory size in bytes.
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes 1.61734656e+08
triage_decisions_total{path="slow",reason="slow_granted"} 3
triage_decisions_total{path="fast",reason="fast model x"} 4 1700000000000
triage_slow_active 0
bad_line
`
	m := Parse([]byte(in))
	require.Equal(t, 1.61734656e+08, m.Get("process_resident_memory_bytes"))
	require.Equal(t, 3.0, m.Get(`triage_decisions_total{path="slow",reason="slow_granted"}`))
	require.Equal(t, 7.0, m.Sum("triage_decisions_total"))
	require.Equal(t, 0.0, m.Get("triage_slow_active"))
	require.True(t, math.IsNaN(m.Get("absent")))
	require.Equal(t, 0.0, m.Sum("absent"))
	require.Equal(t, 0.0, m.Sum("triage_slow"), "a name prefix is not the metric")
}

func TestPoll(t *testing.T) {
	var scrapes atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := scrapes.Add(1)
		if n == 1 {
			w.WriteHeader(http.StatusInternalServerError) // a failed scrape is skipped
			return
		}
		fmt.Fprintf(w, "# TYPE scrapes counter\nscrapes %d\n", n)
	}))
	defer srv.Close()
	type rec struct {
		since time.Duration
		n     float64
	}
	got := make(chan rec, 64)
	stop := Poll(context.Background(), srv.Client(), srv.URL, time.Millisecond, func(since time.Duration, s Samples) {
		select {
		case got <- rec{since, s.Get("scrapes")}:
		default:
		}
	})
	first, second := <-got, <-got
	stop()
	require.Equal(t, 2.0, first.n, "the failed first scrape is not recorded")
	require.Equal(t, 3.0, second.n)
	require.Positive(t, first.since)
	require.Greater(t, second.since, first.since)
}
