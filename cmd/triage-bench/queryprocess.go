package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/triage-gw/triage/bench/load"
	"github.com/triage-gw/triage/bench/report"
	"github.com/triage-gw/triage/bench/stats"
)

// reasonOrder lists decision reasons in table order; others follow sorted.
var reasonOrder = []string{"slow_granted", "fast_model", "load_shedding", "slow_saturated", "slow_unhealthy"}

func scenarioQueryProcess(ctx context.Context, env *gwEnv) (report.Scenario, error) {
	n := env.cfg.QPClients
	d := env.cfg.duration("query-process")
	res := report.Scenario{Name: "query-process", Title: fmt.Sprintf("%d concurrent clients on /v1/query-process, built-in simulated pools", n)}
	texts, err := newTextSource(env.rows, env.cfg.Seed+7, false)
	if err != nil {
		return res, err
	}
	c := load.NewClient(n, env.cfg.RequestTimeout)
	url := env.url("/v1/query-process")
	// Warm the texts into the result cache first, so the run measures the
	// decision under slow-pool load rather than the classifier's throughput
	// (a hit is still decided again under the current load).
	nTexts := env.cfg.QPTexts
	if err := warmClassify(ctx, c, env.url("/v1/classify"), texts, nTexts); err != nil {
		return res, fmt.Errorf("warming: %w", err)
	}

	type gauge struct {
		T          float64 `json:"t_s"`
		SlowActive float64 `json:"slow_active"`
		Threshold  float64 `json:"threshold"`
	}
	var (
		gauges []gauge
		gmu    sync.Mutex
	)
	sctx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(sampled)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-sctx.Done():
				return
			case <-tick.C:
			}
			m, err := env.gw.metrics(sctx)
			if err != nil {
				continue
			}
			gmu.Lock()
			gauges = append(gauges, gauge{T: time.Since(start).Seconds(), SlowActive: m.Sum("triage_slow_active"), Threshold: m.Sum("triage_decision_threshold")})
			gmu.Unlock()
		}
	}()
	ramp := time.Duration(float64(d) * env.cfg.QPRamp)
	ss, wall := load.ClosedLoop{Workers: n, Ramp: ramp, Duration: d}.Run(ctx, func(ctx context.Context, _ int, seq int64) load.Sample {
		return load.PostJSON(ctx, c, url, texts.item(seq%int64(nTexts)).body(), false)
	})
	stopSampling()
	<-sampled

	const bucket = 1.0 // seconds
	nb := int(math.Ceil(d.Seconds() / bucket))
	type row struct {
		n       int
		reasons map[string]int
		failed  int
	}
	rows := make([]row, max(nb, 1))
	for i := range rows {
		rows[i].reasons = map[string]int{}
	}
	total := map[string]int{}
	var okLat []time.Duration
	cacheHits := 0
	for _, s := range ss {
		i := min(int(s.At.Seconds()/bucket), len(rows)-1)
		rows[i].n++
		if !s.OK() {
			rows[i].failed++
			continue
		}
		okLat = append(okLat, s.Latency)
		r := s.Header.Get("x-router-reason")
		if r == "" {
			r = "(none)"
		}
		rows[i].reasons[r]++
		total[r]++
		if s.Header.Get("x-router-cache") == "hit" {
			cacheHits++
		}
	}
	if len(okLat) == 0 {
		return res, fmt.Errorf("no successful request: %s", load.FirstError(ss))
	}
	var reasons []string
	for _, r := range reasonOrder {
		if total[r] > 0 {
			reasons = append(reasons, r)
		}
	}
	var extra []string
	for r := range total {
		if !slices.Contains(reasonOrder, r) {
			extra = append(extra, r)
		}
	}
	sort.Strings(extra)
	reasons = append(reasons, extra...)

	share := func(r row, reason string) float64 {
		ok := r.n - r.failed
		if ok == 0 {
			return 0
		}
		return 100 * float64(r.reasons[reason]) / float64(ok)
	}
	gaugeAt := func(t0, t1 float64) (act, thr float64) {
		act, thr = math.NaN(), math.NaN()
		for _, g := range gauges {
			if g.T >= t0 && g.T <= t1 {
				act = g.SlowActive // last sample in the window
				thr = g.Threshold
			}
		}
		return act, thr
	}
	lat := stats.Summarize(okLat)
	okN := len(okLat)
	totalShare := func(reason string) float64 { return 100 * float64(total[reason]) / float64(okN) }
	peak := 0.0
	for _, g := range gauges {
		peak = max(peak, g.SlowActive)
	}
	first, last := rows[0], rows[len(rows)-1]
	res.Summary = []report.Metric{
		{Name: "requests/s, latency p50 / p99", Value: fmt.Sprintf("%.1f, %s", float64(okN)/wall.Seconds(), report.P50P99(lat)), Target: fmt.Sprintf("%d clients ramped up over %s", n, ramp)},
		{Name: "load_shedding share: first second → last second", Value: fmt.Sprintf("%.0f%% → %.0f%%", share(first, "load_shedding"), share(last, "load_shedding")),
			Target: fmt.Sprintf("rises as the slow semaphore fills (peak slow_active %.0f)", peak)},
		{Name: "decisions overall", Value: sharesString(reasons, totalShare)},
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d requests in %.1f s (%d ok, %d failed). The texts cycle over %d Dolly texts of the four categories, warmed into the result cache first, so the classifier is out of the way and each request is decided again under the current slow-pool load (%d of the answers were cache hits). Latency mean %s, p50 %s, p99 %s.\n\n",
		len(ss), wall.Seconds(), okN, len(ss)-okN, nTexts, cacheHits, report.Millis(lat.Mean), report.Millis(lat.P50), report.Millis(lat.P99))
	fmt.Fprintf(&b, "Clients join one by one over the first %s, then all %d run until %s. Share of decisions by reason (x-router-reason) per second of send time, with the slow semaphore (triage_slow_active, peak %d) and the threshold sampled from /metrics at the second's end:\n\n",
		ramp, n, d, int(peakMax(gauges, func(g gauge) float64 { return g.SlowActive })))
	b.WriteString("| t (s) | answers |")
	for _, r := range reasons {
		b.WriteString(" " + r + " |")
	}
	b.WriteString(" failed | slow_active | threshold |\n|---|---|")
	for range reasons {
		b.WriteString("---|")
	}
	b.WriteString("---|---|---|\n")
	for i, r := range rows {
		t0 := float64(i) * bucket
		fmt.Fprintf(&b, "| %.0f–%.0f | %d |", t0, t0+bucket, r.n)
		for _, reason := range reasons {
			fmt.Fprintf(&b, " %.0f%% |", share(r, reason))
		}
		act, thr := gaugeAt(t0, t0+bucket)
		fmt.Fprintf(&b, " %d | %s | %s |\n", r.failed, report.Number(act, 0), report.Number(thr, 3))
	}
	if len(ss) > okN {
		fmt.Fprintf(&b, "\nFailures: %s, e.g. %s.\n", report.Counts(load.StatusCounts(ss)), load.FirstError(ss))
	}
	res.Detail = b.String()
	series := make([]map[string]any, len(rows))
	for i, r := range rows {
		series[i] = map[string]any{"t_s": float64(i) * bucket, "answers": r.n, "failed": r.failed, "reasons": r.reasons}
	}
	res.Data = map[string]any{"requests": len(ss), "ok": okN, "latency": lat, "reasons": total, "windows": series, "gauges": gauges,
		"cache_hits": cacheHits, "status": load.StatusCounts(ss)}
	return res, nil
}

func sharesString(reasons []string, share func(string) float64) string {
	parts := make([]string, len(reasons))
	for i, r := range reasons {
		parts[i] = fmt.Sprintf("%s %.0f%%", r, share(r))
	}
	return strings.Join(parts, ", ")
}

func peakMax[T any](xs []T, f func(T) float64) float64 {
	m := 0.0
	for _, x := range xs {
		m = max(m, f(x))
	}
	return m
}
