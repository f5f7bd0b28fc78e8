package gatewaybench

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/bench/load"
)

// TestQueryProcessTally checks how answers are binned by send second and by
// x-router-reason, and the table that shows them.
func TestQueryProcessTally(t *testing.T) {
	ok := func(at time.Duration, reason, cache string) load.Sample {
		h := http.Header{}
		if reason != "" {
			h.Set("x-router-reason", reason)
		}
		if cache != "" {
			h.Set("x-router-cache", cache)
		}
		return load.Sample{At: at, Latency: 10 * time.Millisecond, Status: http.StatusOK, Header: h}
	}
	run := &queryProcessRun{clients: 4, texts: 8, d: 2 * time.Second, ramp: time.Second, wall: 2 * time.Second,
		ss: []load.Sample{
			ok(200*time.Millisecond, "fast_model", ""),
			ok(500*time.Millisecond, "load_shedding", "hit"),
			{At: 1500 * time.Millisecond, Status: http.StatusTooManyRequests},
			ok(1700*time.Millisecond, "zzz_new", ""),
			ok(2500*time.Millisecond, "", ""), // sent after d: counted in the last second
		},
		gauges: []slowGauge{{T: 0.9, SlowActive: 3, Threshold: 0.5}, {T: 1.2, SlowActive: 7, Threshold: 0.6}, {T: 1.8, SlowActive: 5, Threshold: 0.7}},
	}
	run.tally()

	require.Len(t, run.windows, 2)
	require.Equal(t, 2, run.windows[0].n)
	require.Equal(t, 3, run.windows[1].n)
	require.Equal(t, 1, run.windows[1].failed)
	require.Equal(t, 50.0, run.windows[0].share("load_shedding"))
	require.Equal(t, 50.0, run.windows[1].share("zzz_new"), "failures are not in the denominator")
	require.Equal(t, []string{"fast_model", "load_shedding", "(none)", "zzz_new"}, run.reasons, "known reasons first, in table order")
	require.Equal(t, 1, run.cacheHits)
	require.Len(t, run.okLat, 4)
	require.Equal(t, 7.0, run.peakSlowActive())
	act, thr := run.gaugeAt(1, 2)
	require.Equal(t, 5.0, act, "the window's last sample")
	require.Equal(t, 0.7, thr)

	sum := run.summary()
	require.Equal(t, "50% → 0%", sum[1].Value)
	require.Equal(t, "fast_model 25%, load_shedding 25%, (none) 25%, zzz_new 25%", sum[2].Value)
	detail := run.detail()
	require.Contains(t, detail, "| t (s) | answers | fast_model | load_shedding | (none) | zzz_new | failed | slow_active | threshold |\n|---|---|---|---|---|---|---|---|---|\n")
	require.Contains(t, detail, "| 0–1 | 2 | 50% | 50% | 0% | 0% | 0 | 3 | 0.500 |\n")
	require.Contains(t, detail, "| 1–2 | 3 | 0% | 0% | 50% | 50% | 1 | 5 | 0.700 |\n")
	require.Contains(t, detail, "Failures: 200: 4, 429: 1, e.g. status 429.")
}
