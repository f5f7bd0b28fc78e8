package gatewaybench

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/triage-gw/triage/bench/load"
	"github.com/triage-gw/triage/bench/report"
	"github.com/triage-gw/triage/bench/stats"
)

// scenarioSeqMiss: one client, one distinct text after another.
func scenarioSeqMiss(ctx context.Context, env *gwEnv) (report.Scenario, error) {
	res := report.Scenario{Name: "seq-miss", Title: "one sequential client, cache misses, /v1/classify"}
	c := load.NewClient(2, env.cfg.RequestTimeout)
	url := env.url("/v1/classify")
	m0, err := env.gw.Metrics(ctx)
	if err != nil {
		return res, err
	}
	ss, wall := load.ClosedLoop{Workers: 1, Duration: env.cfg.duration("seq-miss"), Limit: env.cfg.SeqRequests}.Run(ctx, func(ctx context.Context, _ int, _ int64) load.Sample {
		return load.PostJSON(ctx, c, url, env.misses.Take().body(), true)
	})
	m1, err := env.gw.Metrics(ctx)
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
		{Name: "gateway CPU s per 1,000 requests", Value: fmt.Sprintf("%.2f", bd.cpuPer1000(t.OK))},
		{Name: "decided by the cascade's first stage", Value: share(bd.staticShare())},
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
	m0, err := env.gw.Metrics(ctx)
	if err != nil {
		return classifyTally{}, batcherDelta{}, nil, 0, err
	}
	ss, wall := load.ClosedLoop{Workers: clients, Duration: d}.Run(ctx, func(ctx context.Context, _ int, _ int64) load.Sample {
		return load.PostJSON(ctx, c, url, env.misses.Take().body(), true)
	})
	m1, err := env.gw.Metrics(ctx)
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
		{Name: "texts/s", Value: fmt.Sprintf("%.1f", rate), Target: "original Python prototype: 6.5 req/s at 20 clients; encoder ceiling expected on 2 vCPUs ≈ 190 texts/s fp32 (docs/sources.md)"},
		{Name: "latency p50 / p99", Value: report.P50P99(lat), Target: "original Python prototype (20 clients): x-router-latency p50 103 ms, p99 174 ms"},
		{Name: "tokens per text (mean)", Value: fmt.Sprintf("%.1f", tokens.Mean), Target: "expected: ≈ 57 on the four categories"},
		{Name: "tokens/s end to end", Value: fmt.Sprintf("%.0f", sumTok/wall.Seconds()), Target: "encoder best expected on 2 vCPUs ≈ 11,000 fp32, 24,000 int8"},
		{Name: "gateway CPU s per 1,000 requests", Value: fmt.Sprintf("%.2f", bd.cpuPer1000(t.OK))},
		{Name: "decided by the cascade's first stage", Value: share(bd.staticShare())},
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
		bodies[i] = env.misses.Take().body()
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

	hello, err := startHello(ctx)
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
		{Name: "req/s", Value: fmt.Sprintf("%.0f", grate), Target: fmt.Sprintf("bare net/http %.0f req/s (gateway %.0f%% of it); original Python prototype: 63.8 req/s at 100 clients", hrate, 100*grate/hrate)},
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

// share formats a fraction as a percentage; NaN (a gateway without the metric it comes
// from, such as one older than the cascade) is "n/a".
func share(f float64) string {
	if math.IsNaN(f) {
		return "n/a"
	}
	return fmt.Sprintf("%.1f%%", 100*f)
}
