package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/triage-gw/triage/bench/load"
	"github.com/triage-gw/triage/bench/promtext"
	"github.com/triage-gw/triage/bench/report"
	"github.com/triage-gw/triage/bench/stats"
)

// classifyAnswer is the part of a /v1/classify answer the scenarios read.
type classifyAnswer struct {
	Results []struct {
		Cache  string `json:"cache"`
		Tokens int    `json:"tokens"`
		Reason string `json:"reason"`
	} `json:"results"`
}

// classifyTally sums up /v1/classify samples whose bodies were kept.
type classifyTally struct {
	OK, Hits, Misses, Failed int
	Tokens                   []float64
	RouterMs                 []float64 // x-router-latency, where sent
	Latency                  []time.Duration
}

func tallyClassify(ss []load.Sample) classifyTally {
	var t classifyTally
	for _, s := range ss {
		if !s.OK() {
			t.Failed++
			continue
		}
		t.OK++
		t.Latency = append(t.Latency, s.Latency)
		if v, ok := load.HeaderMillis(s.Header, "x-router-latency"); ok {
			t.RouterMs = append(t.RouterMs, v)
		}
		var a classifyAnswer
		if err := json.Unmarshal(s.Body, &a); err != nil || len(a.Results) == 0 {
			continue
		}
		for _, r := range a.Results {
			if r.Cache == "hit" {
				t.Hits++
			} else {
				t.Misses++
			}
			t.Tokens = append(t.Tokens, float64(r.Tokens))
		}
	}
	return t
}

// batcherDelta is the batcher's work between two scrapes.
type batcherDelta struct {
	Batches      float64 `json:"batches"`
	Texts        float64 `json:"texts"`
	InferenceSec float64 `json:"inference_s"`
}

func deltaBatcher(a, b promtext.Samples) batcherDelta {
	d := func(name string) float64 { return b.Sum(name) - a.Sum(name) }
	return batcherDelta{
		Batches:      d("triage_batcher_inference_seconds_count"),
		Texts:        d("triage_batcher_batch_size_sum"),
		InferenceSec: d("triage_batcher_inference_seconds_sum"),
	}
}

func (d batcherDelta) meanInferenceMs() float64 {
	if d.Batches <= 0 {
		return math.NaN()
	}
	return 1000 * d.InferenceSec / d.Batches
}

func (d batcherDelta) meanBatch() float64 {
	if d.Batches <= 0 {
		return math.NaN()
	}
	return d.Texts / d.Batches
}

// scenarioSeqMiss: one client, one distinct text after another.
func scenarioSeqMiss(ctx context.Context, env *gwEnv) (report.Scenario, error) {
	res := report.Scenario{Name: "seq-miss", Title: "one sequential client, cache misses, /v1/classify"}
	c := load.NewClient(2, env.cfg.RequestTimeout)
	url := env.url("/v1/classify")
	m0, err := env.gw.metrics(ctx)
	if err != nil {
		return res, err
	}
	ss, wall := load.ClosedLoop{Workers: 1, Duration: env.cfg.duration("seq-miss"), Limit: env.cfg.SeqRequests}.Run(ctx, func(ctx context.Context, _ int, _ int64) load.Sample {
		return load.PostJSON(ctx, c, url, env.misses.take().body(), true)
	})
	m1, err := env.gw.metrics(ctx)
	if err != nil {
		return res, err
	}
	t := tallyClassify(ss)
	if t.OK == 0 {
		return res, fmt.Errorf("no successful request: %s", load.FirstError(ss))
	}
	bd := deltaBatcher(m0, m1)
	lat := stats.Summarize(t.Latency)
	router := stats.SummarizeFloats(t.RouterMs)
	tokens := stats.SummarizeFloats(t.Tokens)
	infer := bd.meanInferenceMs()
	bound := infer + 2

	// Means add up where percentiles do not: the mean client latency minus
	// the mean single-text inference is the mean cost of everything else
	// (HTTP, JSON, tokenisation, queueing, decision).
	overhead := lat.Mean - infer
	routerVal, routerTarget := "not sent by /v1/classify", ""
	if len(t.RouterMs) > 0 {
		routerVal = report.P50P99(router)
		routerTarget = fmt.Sprintf("mean %s vs inference + 2 ms = %s: %s", report.Millis(router.Mean), report.Millis(bound), report.Verdict(router.Mean <= bound))
	}
	res.Summary = []report.Metric{
		{Name: "x-router-latency p50 / p99", Value: routerVal, Target: routerTarget},
		{Name: "client latency p50 / p99 (mean)", Value: fmt.Sprintf("%s (%s)", report.P50P99(lat), report.Millis(lat.Mean))},
		{Name: "single-text inference, mean (batcher)", Value: report.Millis(infer), Target: fmt.Sprintf("mean batch %.2f texts", bd.meanBatch())},
		{Name: "client mean − inference mean", Value: report.Millis(overhead), Target: fmt.Sprintf("≤ 2 ms: %s", report.Verdict(overhead <= 2))},
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d requests in %.1f s (%d ok, %d failed), %d cache misses and %d hits; tokens per text mean %.0f, p50 %.0f, p99 %.0f.\n\n",
		len(ss), wall.Seconds(), t.OK, t.Failed, t.Misses, t.Hits, tokens.Mean, tokens.P50, tokens.P99)
	fmt.Fprintf(&b, "| | mean | p50 | p90 | p99 | max |\n|---|---|---|---|---|---|\n")
	fmt.Fprintf(&b, "| client latency | %s | %s | %s | %s | %s |\n", report.Millis(lat.Mean), report.Millis(lat.P50), report.Millis(lat.P90), report.Millis(lat.P99), report.Millis(lat.Max))
	if len(t.RouterMs) > 0 {
		fmt.Fprintf(&b, "| x-router-latency | %s | %s | %s | %s | %s |\n", report.Millis(router.Mean), report.Millis(router.P50), report.Millis(router.P90), report.Millis(router.P99), report.Millis(router.Max))
	}
	fmt.Fprintf(&b, "\nBatcher over the run (from /metrics): %.0f batches, %.0f texts, mean inference %s per batch.\n", bd.Batches, bd.Texts, report.Millis(infer))
	if len(t.RouterMs) == 0 {
		b.WriteString("The gateway sent no x-router-latency header on /v1/classify, so the client latency (an upper bound: it adds the HTTP round trip and JSON) stands in for it. ")
	}
	fmt.Fprintf(&b, "The mean client latency exceeds the mean single-text inference by %s (texts vary from a few to 256 tokens, so percentiles of the two cannot be subtracted).\n", report.Millis(overhead))
	res.Detail = b.String()
	res.Data = map[string]any{"requests": len(ss), "ok": t.OK, "cache_hits": t.Hits, "latency": lat, "router_latency": router,
		"tokens": tokens, "batcher": bd, "inference_mean_ms": report.Finite(infer), "overhead_mean_ms": report.Finite(overhead), "errors": t.Failed, "first_error": load.FirstError(ss)}
	return res, nil
}

// concMiss measures classify throughput on distinct texts with n clients.
func concMiss(ctx context.Context, env *gwEnv, clients int, d time.Duration) (classifyTally, batcherDelta, []load.Sample, time.Duration, error) {
	c := load.NewClient(clients, env.cfg.RequestTimeout)
	url := env.url("/v1/classify")
	m0, err := env.gw.metrics(ctx)
	if err != nil {
		return classifyTally{}, batcherDelta{}, nil, 0, err
	}
	ss, wall := load.ClosedLoop{Workers: clients, Duration: d}.Run(ctx, func(ctx context.Context, _ int, _ int64) load.Sample {
		return load.PostJSON(ctx, c, url, env.misses.take().body(), true)
	})
	m1, err := env.gw.metrics(ctx)
	if err != nil {
		return classifyTally{}, batcherDelta{}, nil, 0, err
	}
	return tallyClassify(ss), deltaBatcher(m0, m1), ss, wall, nil
}

func scenarioConcMiss(ctx context.Context, env *gwEnv) (report.Scenario, error) {
	n := env.cfg.MissClients
	res := report.Scenario{Name: "conc-miss", Title: fmt.Sprintf("%d concurrent clients, cache misses, /v1/classify", n)}
	t, bd, ss, wall, err := concMiss(ctx, env, n, env.cfg.duration("conc-miss"))
	if err != nil {
		return res, err
	}
	if t.OK == 0 {
		return res, fmt.Errorf("no successful request: %s", load.FirstError(ss))
	}
	rate := float64(t.OK) / wall.Seconds()
	env.missCapacity = rate
	lat := stats.Summarize(t.Latency)
	tokens := stats.SummarizeFloats(slices.Clone(t.Tokens))
	var sumTok float64
	for _, x := range t.Tokens {
		sumTok += x
	}
	busy := bd.InferenceSec / wall.Seconds()
	encTokS := math.NaN()
	if bd.InferenceSec > 0 {
		encTokS = sumTok / bd.InferenceSec
	}
	res.Summary = []report.Metric{
		{Name: "texts/s", Value: fmt.Sprintf("%.1f", rate), Target: "seed 003: 6.5 req/s at 20 clients; DESIGN §6 encoder ceiling ≈ 190 texts/s fp32"},
		{Name: "latency p50 / p99", Value: report.P50P99(lat), Target: "seed 003 (20 clients): x-router-latency p50 103 ms, p99 174 ms"},
		{Name: "tokens per text (mean)", Value: fmt.Sprintf("%.1f", tokens.Mean), Target: "DESIGN §6: ≈ 57 on the four categories"},
		{Name: "tokens/s end to end", Value: fmt.Sprintf("%.0f", sumTok/wall.Seconds()), Target: "DESIGN §6: encoder best ≈ 11,000 fp32, 24,000 int8"},
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d requests in %.1f s (%d ok, %d failed), %d cache misses and %d hits. Tokens per text: mean %.1f, p50 %.0f, p90 %.0f, p99 %.0f.\n\n",
		len(ss), wall.Seconds(), t.OK, t.Failed, t.Misses, t.Hits, tokens.Mean, tokens.P50, tokens.P90, tokens.P99)
	fmt.Fprintf(&b, "Latency: mean %s, p50 %s, p90 %s, p99 %s, max %s.\n\n", report.Millis(lat.Mean), report.Millis(lat.P50), report.Millis(lat.P90), report.Millis(lat.P99), report.Millis(lat.Max))
	fmt.Fprintf(&b, "Batcher (from /metrics): %.0f batches, mean %.1f texts per batch, mean inference %s per batch; the encoder was busy %.0f%% of the wall time, at %.0f tokens/s while busy.\n",
		bd.Batches, bd.meanBatch(), report.Millis(bd.meanInferenceMs()), 100*busy, encTokS)
	if t.Failed > 0 {
		fmt.Fprintf(&b, "\nFailures: %v, e.g. %s.\n", load.StatusCounts(ss), load.FirstError(ss))
	}
	res.Detail = b.String()
	res.Data = map[string]any{"requests": len(ss), "ok": t.OK, "texts_per_s": rate, "latency": lat, "tokens": tokens,
		"tokens_per_s": sumTok / wall.Seconds(), "batcher": bd, "encoder_busy": busy, "encoder_tokens_per_s_busy": report.Finite(encTokS),
		"cache_hits": t.Hits, "status": load.StatusCounts(ss)}
	return res, nil
}

func scenarioConcHit(ctx context.Context, env *gwEnv) (report.Scenario, error) {
	n := env.cfg.HitClients
	res := report.Scenario{Name: "conc-hit", Title: fmt.Sprintf("%d concurrent clients, cache hits, /v1/classify, beside a bare net/http server", n)}
	c := load.NewClient(n, env.cfg.RequestTimeout)
	url := env.url("/v1/classify")
	bodies := make([][]byte, env.cfg.HitTexts)
	for i := range bodies {
		bodies[i] = env.misses.take().body()
		if s := load.PostJSON(ctx, c, url, bodies[i], false); !s.OK() {
			return res, fmt.Errorf("warming text %d: %s", i, load.FirstError([]load.Sample{s}))
		}
	}
	d := env.cfg.duration("conc-hit")
	hitMark := []byte(`"cache":"hit"`)
	drive := func(c *http.Client, target string) ([]load.Sample, time.Duration, int) {
		var mu sync.Mutex
		hits := 0
		ss, wall := load.ClosedLoop{Workers: n, Duration: d}.Run(ctx, func(ctx context.Context, _ int, seq int64) load.Sample {
			s := load.PostJSON(ctx, c, target, bodies[seq%int64(len(bodies))], true)
			if bytes.Contains(s.Body, hitMark) {
				mu.Lock()
				hits++
				mu.Unlock()
			}
			s.Body = nil
			return s
		})
		return ss, wall, hits
	}
	gss, gwall, hits := drive(c, url)
	c.CloseIdleConnections()

	hello, err := startHello()
	if err != nil {
		return res, fmt.Errorf("baseline: %w", err)
	}
	hc := load.NewClient(n, env.cfg.RequestTimeout)
	hss, hwall, _ := drive(hc, hello.base+"/v1/classify")
	hc.CloseIdleConnections()
	hello.stop()

	gok, hok := load.Latencies(gss, load.Sample.OK), load.Latencies(hss, load.Sample.OK)
	if len(gok) == 0 {
		return res, fmt.Errorf("no successful request: %s", load.FirstError(gss))
	}
	g, h := stats.Summarize(gok), stats.Summarize(hok)
	grate, hrate := float64(len(gok))/gwall.Seconds(), float64(len(hok))/hwall.Seconds()
	res.Summary = []report.Metric{
		{Name: "req/s", Value: fmt.Sprintf("%.0f", grate), Target: fmt.Sprintf("bare net/http %.0f req/s (gateway %.0f%% of it); seed 003: 63.8 req/s at 100 clients", hrate, 100*grate/hrate)},
		{Name: "client p99", Value: report.Millis(g.P99), Target: fmt.Sprintf("bare net/http p99 %s (gateway %.1f×)", report.Millis(h.P99), g.P99/h.P99)},
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d texts warmed first. Same Go client (keep-alive, %d idle connections per host), same bodies, %s each, one after the other; the baseline is `triage-bench hello`, a separate process answering a fixed small JSON.\n\n",
		len(bodies), n, d)
	b.WriteString("| server | requests | ok | req/s | p50 | p90 | p99 | max |\n|---|---|---|---|---|---|---|---|\n")
	fmt.Fprintf(&b, "| gateway /v1/classify (hits) | %d | %d | %.0f | %s | %s | %s | %s |\n", len(gss), len(gok), grate, report.Millis(g.P50), report.Millis(g.P90), report.Millis(g.P99), report.Millis(g.Max))
	fmt.Fprintf(&b, "| bare net/http | %d | %d | %.0f | %s | %s | %s | %s |\n", len(hss), len(hok), hrate, report.Millis(h.P50), report.Millis(h.P90), report.Millis(h.P99), report.Millis(h.Max))
	fmt.Fprintf(&b, "\nCache hits among the gateway's answers: %d of %d.\n", hits, len(gok))
	if len(gok) < len(gss) {
		fmt.Fprintf(&b, "Gateway failures: %v, e.g. %s.\n", load.StatusCounts(gss), load.FirstError(gss))
	}
	res.Detail = b.String()
	res.Data = map[string]any{"gateway": map[string]any{"requests": len(gss), "ok": len(gok), "req_per_s": grate, "latency": g, "cache_hits": hits, "status": load.StatusCounts(gss)},
		"baseline": map[string]any{"requests": len(hss), "ok": len(hok), "req_per_s": hrate, "latency": h, "status": load.StatusCounts(hss)}}
	return res, nil
}

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

// warmClassify classifies texts 0..n-1 of src in /v1/classify batches of
// up to 32, so later requests for them are cache hits.
func warmClassify(ctx context.Context, c *http.Client, url string, src *textSource, n int) error {
	for i := 0; i < n; i += 32 {
		var items []classifyItem
		for j := i; j < min(i+32, n); j++ {
			items = append(items, src.item(int64(j)))
		}
		body, err := json.Marshal(map[string]any{"texts": items})
		if err != nil {
			return err
		}
		if s := load.PostJSON(ctx, c, url, body, false); !s.OK() {
			return fmt.Errorf("classify batch at %d: %s", i, load.FirstError([]load.Sample{s}))
		}
	}
	return nil
}

func peakMax[T any](xs []T, f func(T) float64) float64 {
	m := 0.0
	for _, x := range xs {
		m = max(m, f(x))
	}
	return m
}
