package gatewaybench

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/triage-gw/triage/bench/load"
	"github.com/triage-gw/triage/bench/promtext"
	"github.com/triage-gw/triage/bench/report"
	"github.com/triage-gw/triage/bench/stats"
)

// overloadPoint is the gateway's state at one second of the overload run.
type overloadPoint struct {
	T        float64 `json:"t_s"`
	RSS      float64 `json:"rss_bytes"`
	Queue    float64 `json:"batcher_queue"`
	InFlight float64 `json:"in_flight"`
}

// overloadRun is what the overload scenario measured.
type overloadRun struct {
	rate    float64       // arrivals per second
	capNote string        // where rate comes from
	d       time.Duration // arrival window
	ol      load.OpenLoopResult
	points  []overloadPoint

	rssBefore, rssPeak, rssAfter float64
	counts                       map[string]int // answers by status
	okLat, rejLat                stats.Summary  // of the 200s and of the 429s
}

func scenarioOverload(ctx context.Context, env *gwEnv) (report.Scenario, error) {
	res := report.Scenario{Name: "overload", Title: "open-loop cache misses far beyond capacity, /v1/classify"}
	rate, capNote, err := overloadRate(ctx, env)
	if err != nil {
		return res, err
	}
	run := &overloadRun{rate: rate, capNote: capNote, d: env.cfg.duration("overload")}
	m0, err := env.gw.Metrics(ctx)
	if err != nil {
		return res, err
	}
	run.rssBefore = m0.Get("process_resident_memory_bytes")

	// Sample RSS and the batcher queue every second while the load runs.
	stopSampling := env.gw.PollMetrics(ctx, time.Second, func(since time.Duration, m promtext.Samples) {
		if math.IsNaN(m.Get("process_resident_memory_bytes")) {
			return
		}
		run.points = append(run.points, overloadPoint{T: since.Seconds(), RSS: m.Get("process_resident_memory_bytes"),
			Queue: m.Get("triage_batcher_queue_depth"), InFlight: m.Get("triage_inflight_requests")})
	})

	c := load.NewClient(env.cfg.OverloadFlight, env.cfg.RequestTimeout)
	url := env.url("/v1/classify")
	run.ol = load.OpenLoop{Rate: rate, Duration: run.d, MaxInFlight: env.cfg.OverloadFlight, Seed: env.cfg.Seed}.Run(ctx, func(ctx context.Context, _ int64) load.Sample {
		return load.PostJSON(ctx, c, url, env.misses.Take().body(), false)
	})
	if err := env.gw.WaitIdle(ctx, time.Minute); err != nil {
		stopSampling()
		return res, err
	}
	// Let the runtime return what it will; RSS "after" is read 3 s after the last answer.
	select {
	case <-ctx.Done():
	case <-time.After(3 * time.Second):
	}
	stopSampling()
	c.CloseIdleConnections()
	m2, err := env.gw.Metrics(ctx)
	if err != nil {
		return res, err
	}
	run.rssAfter = m2.Get("process_resident_memory_bytes")
	run.tally()
	res.Summary, res.Detail, res.Data = run.summary(env.cfg), run.detail(env.cfg), run.data()
	return res, nil
}

// overloadRate is the overload arrival rate and a note on where it comes
// from: --overload-rate, or --overload-factor times the cache-miss capacity
// conc-miss measured (measured here, in 3 s, if conc-miss did not run).
func overloadRate(ctx context.Context, env *gwEnv) (float64, string, error) {
	if rate := env.cfg.OverloadRate; rate != 0 {
		return rate, "set by --overload-rate", nil
	}
	if env.missCapacity == 0 {
		fmt.Fprintln(env.stderr, "  measuring cache-miss capacity (3 s, conc-miss clients) ...")
		t, _, ss, wall, err := concMiss(ctx, env, env.cfg.MissClients, 3*time.Second)
		if err != nil {
			return 0, "", err
		}
		if t.OK == 0 {
			return 0, "", fmt.Errorf("capacity probe: no successful request: %s", load.FirstError(ss))
		}
		env.missCapacity = float64(t.OK) / wall.Seconds()
		if err := env.gw.WaitIdle(ctx, time.Minute); err != nil {
			return 0, "", err
		}
	}
	return env.cfg.OverloadFactor * env.missCapacity,
		fmt.Sprintf("%.0f× the measured %.1f texts/s", env.cfg.OverloadFactor, env.missCapacity), nil
}

// tally sums up the answers and the RSS peak.
func (r *overloadRun) tally() {
	r.rssPeak = r.rssBefore
	for _, p := range r.points {
		r.rssPeak = max(r.rssPeak, p.RSS)
	}
	r.counts = load.StatusCounts(r.ol.Samples)
	r.okLat = stats.Summarize(load.Latencies(r.ol.Samples, load.Sample.OK))
	r.rejLat = stats.Summarize(load.Latencies(r.ol.Samples, func(s load.Sample) bool { return s.Status == http.StatusTooManyRequests }))
}

// okRate is the accepted texts per second, first arrival to last answer.
func (r *overloadRun) okRate() float64 { return float64(r.okLat.N) / r.ol.Wall.Seconds() }

func (r *overloadRun) summary(cfg *gatewayConfig) []report.Metric {
	sentRate := float64(len(r.ol.Samples)) / r.ol.Sent.Seconds()
	return []report.Metric{
		{Name: "offered / sent", Value: fmt.Sprintf("%.0f / %.0f req/s", float64(r.ol.Offered)/r.d.Seconds(), sentRate), Target: r.capNote + fmt.Sprintf("; %d dropped at the client's %d in-flight bound", r.ol.Dropped, cfg.OverloadFlight)},
		{Name: "status counts", Value: report.Counts(r.counts), Target: "429 expected beyond the batcher queue"},
		{Name: "accepted: texts/s, p50 / p99", Value: fmt.Sprintf("%.1f, %s", r.okRate(), report.P50P99(r.okLat)), Target: fmt.Sprintf("429s answered in p99 %s", report.Millis(r.rejLat.P99))},
		{Name: "RSS before / peak / after", Value: fmt.Sprintf("%s / %s / %s", mib(r.rssBefore), mib(r.rssPeak), mib(r.rssAfter)), Target: "sampled every second; after = 3 s after the last answer"},
	}
}

func (r *overloadRun) detail(cfg *gatewayConfig) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Poisson arrivals at %.0f/s for %s (%s), each a distinct text; at most %d requests outstanding on the client side (arrivals beyond are dropped and counted, not queued). Client timeout %s.\n\n",
		r.rate, r.d, r.capNote, cfg.OverloadFlight, cfg.RequestTimeout)
	fmt.Fprintf(&b, "Arrivals %d, sent %d, dropped at the client %d. Answers by status: %s. The run took %.1f s from the first arrival to the last answer.\n\n",
		r.ol.Offered, len(r.ol.Samples), r.ol.Dropped, report.Counts(r.counts), r.ol.Wall.Seconds())
	b.WriteString("| answers | n | p50 | p90 | p99 | max |\n|---|---|---|---|---|---|\n")
	fmt.Fprintf(&b, "| 200 | %d | %s | %s | %s | %s |\n", r.okLat.N, report.Millis(r.okLat.P50), report.Millis(r.okLat.P90), report.Millis(r.okLat.P99), report.Millis(r.okLat.Max))
	fmt.Fprintf(&b, "| 429 | %d | %s | %s | %s | %s |\n", r.rejLat.N, report.Millis(r.rejLat.P50), report.Millis(r.rejLat.P90), report.Millis(r.rejLat.P99), report.Millis(r.rejLat.Max))
	b.WriteString("\nGateway every second (from /metrics):\n\n| t (s) | RSS MiB | batcher queue | in flight |\n|---|---|---|---|\n")
	for _, p := range r.points {
		fmt.Fprintf(&b, "| %.0f | %.0f | %.0f | %.0f |\n", p.T, p.RSS/(1<<20), p.Queue, p.InFlight)
	}
	fmt.Fprintf(&b, "\nRSS before %s, peak %s, after %s (3 s after the last answer).\n", mib(r.rssBefore), mib(r.rssPeak), mib(r.rssAfter))
	if e := load.FirstError(r.ol.Samples); e != "" && r.counts["error"] > 0 {
		fmt.Fprintf(&b, "Client-side failures: %d, e.g. %s.\n", r.counts["error"], e)
	}
	return b.String()
}

func (r *overloadRun) data() map[string]any {
	return map[string]any{"rate": r.rate, "offered": r.ol.Offered, "sent": len(r.ol.Samples), "dropped": r.ol.Dropped, "status": r.counts,
		"ok_latency": r.okLat, "rejected_latency": r.rejLat, "ok_per_s": r.okRate(), "rss_before": report.Finite(r.rssBefore), "rss_peak": report.Finite(r.rssPeak),
		"rss_after": report.Finite(r.rssAfter), "samples": r.points}
}

// mib formats bytes as whole MiB.
func mib(b float64) string { return fmt.Sprintf("%.0f MiB", b/(1<<20)) }
