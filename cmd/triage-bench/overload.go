package main

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/triage-gw/triage/bench/load"
	"github.com/triage-gw/triage/bench/report"
	"github.com/triage-gw/triage/bench/stats"
)

func scenarioOverload(ctx context.Context, env *gwEnv) (report.Scenario, error) {
	res := report.Scenario{Name: "overload", Title: "open-loop cache misses far beyond capacity, /v1/classify"}
	rate := env.cfg.OverloadRate
	capNote := "set by --overload-rate"
	if rate == 0 {
		if env.missCapacity == 0 {
			fmt.Fprintln(env.stderr, "  measuring cache-miss capacity (3 s, conc-miss clients) ...")
			t, _, ss, wall, err := concMiss(ctx, env, env.cfg.MissClients, 3*time.Second)
			if err != nil {
				return res, err
			}
			if t.OK == 0 {
				return res, fmt.Errorf("capacity probe: no successful request: %s", load.FirstError(ss))
			}
			env.missCapacity = float64(t.OK) / wall.Seconds()
			if err := env.gw.waitIdle(ctx, time.Minute); err != nil {
				return res, err
			}
		}
		rate = env.cfg.OverloadFactor * env.missCapacity
		capNote = fmt.Sprintf("%.0f× the measured %.1f texts/s", env.cfg.OverloadFactor, env.missCapacity)
	}
	d := env.cfg.duration("overload")
	m0, err := env.gw.metrics(ctx)
	if err != nil {
		return res, err
	}
	rssBefore := m0.Get("process_resident_memory_bytes")

	// Sample RSS and the batcher queue every second while the load runs.
	type point struct {
		T        float64 `json:"t_s"`
		RSS      float64 `json:"rss_bytes"`
		Queue    float64 `json:"batcher_queue"`
		InFlight float64 `json:"in_flight"`
	}
	var (
		points []point
		pmu    sync.Mutex
	)
	sctx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(sampled)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-sctx.Done():
				return
			case <-tick.C:
			}
			m, err := env.gw.metrics(sctx)
			if err != nil || math.IsNaN(m.Get("process_resident_memory_bytes")) {
				continue
			}
			pmu.Lock()
			points = append(points, point{T: time.Since(start).Seconds(), RSS: m.Get("process_resident_memory_bytes"),
				Queue: m.Get("triage_batcher_queue_depth"), InFlight: m.Get("triage_inflight_requests")})
			pmu.Unlock()
		}
	}()

	c := load.NewClient(env.cfg.OverloadFlight, env.cfg.RequestTimeout)
	url := env.url("/v1/classify")
	ol := load.OpenLoop{Rate: rate, Duration: d, MaxInFlight: env.cfg.OverloadFlight, Seed: env.cfg.Seed}.Run(ctx, func(ctx context.Context, _ int64) load.Sample {
		return load.PostJSON(ctx, c, url, env.misses.take().body(), false)
	})
	if err := env.gw.waitIdle(ctx, time.Minute); err != nil {
		stopSampling()
		<-sampled
		return res, err
	}
	// Let the runtime return what it will; RSS "after" is read 3 s after the last answer.
	select {
	case <-ctx.Done():
	case <-time.After(3 * time.Second):
	}
	stopSampling()
	<-sampled
	c.CloseIdleConnections()
	m2, err := env.gw.metrics(ctx)
	if err != nil {
		return res, err
	}
	rssAfter := m2.Get("process_resident_memory_bytes")
	rssPeak := rssBefore
	for _, p := range points {
		rssPeak = max(rssPeak, p.RSS)
	}

	counts := load.StatusCounts(ol.Samples)
	okLat := stats.Summarize(load.Latencies(ol.Samples, load.Sample.OK))
	rejLat := stats.Summarize(load.Latencies(ol.Samples, func(s load.Sample) bool { return s.Status == http.StatusTooManyRequests }))
	sentRate := float64(len(ol.Samples)) / ol.Sent.Seconds()
	okRate := float64(okLat.N) / ol.Wall.Seconds()
	mib := func(b float64) string { return fmt.Sprintf("%.0f MiB", b/(1<<20)) }
	res.Summary = []report.Metric{
		{Name: "offered / sent", Value: fmt.Sprintf("%.0f / %.0f req/s", float64(ol.Offered)/d.Seconds(), sentRate), Target: capNote + fmt.Sprintf("; %d dropped at the client's %d in-flight bound", ol.Dropped, env.cfg.OverloadFlight)},
		{Name: "status counts", Value: report.Counts(counts), Target: "429 expected beyond the batcher queue"},
		{Name: "accepted: texts/s, p50 / p99", Value: fmt.Sprintf("%.1f, %s", okRate, report.P50P99(okLat)), Target: fmt.Sprintf("429s answered in p99 %s", report.Millis(rejLat.P99))},
		{Name: "RSS before / peak / after", Value: fmt.Sprintf("%s / %s / %s", mib(rssBefore), mib(rssPeak), mib(rssAfter)), Target: "sampled every second; after = 3 s after the last answer"},
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Poisson arrivals at %.0f/s for %s (%s), each a distinct text; at most %d requests outstanding on the client side (arrivals beyond are dropped and counted, not queued). Client timeout %s.\n\n",
		rate, d, capNote, env.cfg.OverloadFlight, env.cfg.RequestTimeout)
	fmt.Fprintf(&b, "Arrivals %d, sent %d, dropped at the client %d. Answers by status: %s. The run took %.1f s from the first arrival to the last answer.\n\n",
		ol.Offered, len(ol.Samples), ol.Dropped, report.Counts(counts), ol.Wall.Seconds())
	b.WriteString("| answers | n | p50 | p90 | p99 | max |\n|---|---|---|---|---|---|\n")
	fmt.Fprintf(&b, "| 200 | %d | %s | %s | %s | %s |\n", okLat.N, report.Millis(okLat.P50), report.Millis(okLat.P90), report.Millis(okLat.P99), report.Millis(okLat.Max))
	fmt.Fprintf(&b, "| 429 | %d | %s | %s | %s | %s |\n", rejLat.N, report.Millis(rejLat.P50), report.Millis(rejLat.P90), report.Millis(rejLat.P99), report.Millis(rejLat.Max))
	b.WriteString("\nGateway every second (from /metrics):\n\n| t (s) | RSS MiB | batcher queue | in flight |\n|---|---|---|---|\n")
	for _, p := range points {
		fmt.Fprintf(&b, "| %.0f | %.0f | %.0f | %.0f |\n", p.T, p.RSS/(1<<20), p.Queue, p.InFlight)
	}
	fmt.Fprintf(&b, "\nRSS before %s, peak %s, after %s (3 s after the last answer).\n", mib(rssBefore), mib(rssPeak), mib(rssAfter))
	if e := load.FirstError(ol.Samples); e != "" && counts["error"] > 0 {
		fmt.Fprintf(&b, "Client-side failures: %d, e.g. %s.\n", counts["error"], e)
	}
	res.Detail = b.String()
	res.Data = map[string]any{"rate": rate, "offered": ol.Offered, "sent": len(ol.Samples), "dropped": ol.Dropped, "status": counts,
		"ok_latency": okLat, "rejected_latency": rejLat, "ok_per_s": okRate, "rss_before": report.Finite(rssBefore), "rss_peak": report.Finite(rssPeak),
		"rss_after": report.Finite(rssAfter), "samples": points}
	return res, nil
}
