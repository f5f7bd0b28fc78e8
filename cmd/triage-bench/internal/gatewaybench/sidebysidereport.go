package gatewaybench

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/triage-gw/triage/bench/report"
	"github.com/triage-gw/triage/bench/stats"
)

// The side-by-side goals (issue "the cache-miss path on prompts as they really arrive"):
// what a cache miss may add to the replica's own latency, and cost in CPU.
const (
	goalMissP50OneClient = 1.0 // ms added at p50, at the smallest client count
	goalMissP99Loaded    = 10.0
	goalMissCPUPer1k     = 1.5 // CPU s per 1,000 requests, at the largest client count
)

// sideLabels name the paths in tables.
var sideLabels = map[string]string{
	pathDirect:  "replica alone (its own latency, not added)",
	pathGoProxy: "Go httputil.ReverseProxy",
	pathHit:     "**Triage, cache hit**",
	pathMiss:    "**Triage, cache miss**",
}

// sideRow is one path at one client count and mode, over every repeat.
type sideRow struct {
	Path    string        `json:"path"`
	Clients int           `json:"clients"`
	Stream  bool          `json:"stream"`
	Pooled  stats.Summary `json:"pooled"` // every repeat's requests together
	// AddedP50 and AddedP99 are the pooled percentiles minus the direct path's pooled ones;
	// RepeatAdded* the same per repeat, against that repeat's direct cell.
	AddedP50       float64   `json:"added_p50_ms"`
	AddedP99       float64   `json:"added_p99_ms"`
	RepeatAddedP50 []float64 `json:"repeat_added_p50_ms"`
	RepeatAddedP99 []float64 `json:"repeat_added_p99_ms"`
	CPUSec         float64   `json:"cpu_s"`
	Requests       int       `json:"requests"`
	Failed         int       `json:"failed"`
	// Stages, Cache and Reasons count the gateway's x-router-* headers; TimingMean is each
	// Server-Timing entry's mean over the answers, in ms.
	Stages     map[string]int     `json:"stages,omitempty"`
	Cache      map[string]int     `json:"cache,omitempty"`
	Reasons    map[string]int     `json:"reasons,omitempty"`
	TimingMean map[string]float64 `json:"server_timing_mean_ms,omitempty"`
	// Encoded is how many texts the encoder ran, answers waiting for them or not.
	Encoded float64 `json:"encoder_texts_run"`
}

// cpuPer1k is the proxying process's CPU seconds per 1,000 requests; NaN for the direct
// path, which has no process of its own.
func (r sideRow) cpuPer1k() float64 {
	if r.Path == pathDirect || r.Requests == 0 {
		return math.NaN()
	}
	return 1000 * r.CPUSec / float64(r.Requests)
}

// staticShare is the share of classified answers whose x-router-stage is static: decided by
// the cascade's first stage, without the encoder. NaN without any stage header.
func (r sideRow) staticShare() float64 {
	n := r.Stages["static"] + r.Stages["encoder"]
	if n == 0 {
		return math.NaN()
	}
	return float64(r.Stages["static"]) / float64(n)
}

// fallbackShare is the share of answers routed by a classifier fallback (x-router-reason
// classifier_busy, classifier_timeout or classifier_unavailable): no classification at all,
// the request sent to the fallback pool when routing.classify_budget ran out. NaN without
// any answer.
func (r sideRow) fallbackShare() float64 {
	n, fb := 0, 0
	for reason, c := range r.Reasons {
		n += c
		if strings.HasPrefix(reason, "classifier_") {
			fb += c
		}
	}
	if n == 0 {
		return math.NaN()
	}
	return float64(fb) / float64(n)
}

// addedMs is what a path adds to the direct one at p50 and p99: the difference of the two
// samples' percentiles (percentiles do not subtract request by request).
func addedMs(path, direct []float64) (p50, p99 float64) {
	p, d := stats.SummarizeFloats(slices.Clone(path)), stats.SummarizeFloats(slices.Clone(direct))
	if p.N == 0 || d.N == 0 {
		return math.NaN(), math.NaN()
	}
	return p.P50 - d.P50, p.P99 - d.P99
}

// sideRows folds the cells into one row per path, client count and mode, in table order.
func sideRows(cells []sideCell) []sideRow {
	type group struct {
		path    string
		clients int
		stream  bool
	}
	byGroup := map[group][]sideCell{}
	var order []group
	for _, c := range cells {
		g := group{c.Path, c.Clients, c.Stream}
		if _, ok := byGroup[g]; !ok {
			order = append(order, g)
		}
		byGroup[g] = append(byGroup[g], c)
	}
	slices.SortStableFunc(order, func(a, b group) int {
		if d := slices.Index(sidePaths, a.path) - slices.Index(sidePaths, b.path); d != 0 {
			return d
		}
		if d := a.clients - b.clients; d != 0 {
			return d
		}
		return boolInt(a.stream) - boolInt(b.stream)
	})
	var rows []sideRow
	for _, g := range order {
		rows = append(rows, foldSide(byGroup[g], byGroup[group{pathDirect, g.clients, g.stream}]))
	}
	return rows
}

// foldSide is one row from its cells and the direct cells of the same client count and mode.
func foldSide(cells, direct []sideCell) sideRow {
	r := sideRow{Path: cells[0].Path, Clients: cells[0].Clients, Stream: cells[0].Stream,
		Stages: map[string]int{}, Cache: map[string]int{}, Reasons: map[string]int{}, TimingMean: map[string]float64{}}
	var lat, dlat []float64
	ok := 0
	for _, c := range cells {
		lat = append(lat, c.lat...)
		r.CPUSec += c.CPUSec
		r.Encoded += c.Encoded
		r.Requests += c.OK + c.Failed
		r.Failed += c.Failed
		ok += c.OK
		addCounts(r.Stages, c.Stages)
		addCounts(r.Cache, c.Cache)
		addCounts(r.Reasons, c.Reasons)
		for k, v := range c.Timing {
			r.TimingMean[k] += v
		}
		for _, d := range direct {
			if d.Repeat == c.Repeat {
				p50, p99 := addedMs(c.lat, d.lat)
				r.RepeatAddedP50 = append(r.RepeatAddedP50, p50)
				r.RepeatAddedP99 = append(r.RepeatAddedP99, p99)
			}
		}
	}
	for _, d := range direct {
		dlat = append(dlat, d.lat...)
	}
	for k := range r.TimingMean {
		r.TimingMean[k] /= float64(max(ok, 1))
	}
	r.AddedP50, r.AddedP99 = addedMs(lat, dlat)
	r.Pooled = stats.SummarizeFloats(lat)
	return r
}

func addCounts(dst, src map[string]int) {
	for k, v := range src {
		dst[k] += v
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// findRow returns the row of path at clients and mode, or a zero row (NaN everywhere it
// matters) when that cell was not run.
func findRow(rows []sideRow, path string, clients int, stream bool) sideRow {
	for _, r := range rows {
		if r.Path == path && r.Clients == clients && r.Stream == stream {
			return r
		}
	}
	nan := math.NaN()
	return sideRow{Path: path, Clients: clients, Stream: stream, AddedP50: nan, AddedP99: nan, Pooled: stats.Summary{Mean: nan, P50: nan, P90: nan, P99: nan, Max: nan}}
}

// passMiss is the verdict on a goal; a value not measured (NaN) misses it.
func passMiss(ok bool) string {
	if ok {
		return "PASS"
	}
	return "MISS"
}

// sideGoals checks the cache-miss goals on the pooled rows, non-streamed and streamed both
// having to meet each, with the Go proxy's figures beside them.
func sideGoals(rows []sideRow, clients []int) []report.Metric {
	lo, hi := slices.Min(clients), slices.Max(clients)
	pair := func(path string, n int, f func(sideRow) float64) (float64, float64) {
		return f(findRow(rows, path, n, false)), f(findRow(rows, path, n, true))
	}
	p50 := func(r sideRow) float64 { return r.AddedP50 }
	p99 := func(r sideRow) float64 { return r.AddedP99 }
	m50a, m50b := pair(pathMiss, lo, p50)
	g50a, g50b := pair(pathGoProxy, lo, p50)
	m99a, m99b := pair(pathMiss, hi, p99)
	g99a, g99b := pair(pathGoProxy, hi, p99)
	cpu := func(path string, n int) float64 {
		a, b := findRow(rows, path, n, false), findRow(rows, path, n, true)
		return sideRow{Path: path, CPUSec: a.CPUSec + b.CPUSec, Requests: a.Requests + b.Requests}.cpuPer1k()
	}
	mcpu := cpu(pathMiss, hi)
	both := func(n int) sideRow { // the miss rows of both modes at n clients, as one
		a, b := findRow(rows, pathMiss, n, false), findRow(rows, pathMiss, n, true)
		r := sideRow{Stages: map[string]int{}, Reasons: map[string]int{}}
		for _, x := range []sideRow{a, b} {
			addCounts(r.Stages, x.Stages)
			addCounts(r.Reasons, x.Reasons)
		}
		return r
	}
	return []report.Metric{
		{Name: fmt.Sprintf("cache miss, added p50 at %d client(s), non-stream / stream TTFT", lo), Value: pairMs(m50a, m50b),
			Target: fmt.Sprintf("≤ %g ms: %s (Go proxy %s)", goalMissP50OneClient, passMiss(m50a <= goalMissP50OneClient && m50b <= goalMissP50OneClient), pairMs(g50a, g50b))},
		{Name: fmt.Sprintf("cache miss, added p99 at %d clients, non-stream / stream TTFT", hi), Value: pairMs(m99a, m99b),
			Target: fmt.Sprintf("≤ %g ms: %s (Go proxy %s)", goalMissP99Loaded, passMiss(m99a <= goalMissP99Loaded && m99b <= goalMissP99Loaded), pairMs(g99a, g99b))},
		{Name: fmt.Sprintf("cache miss, gateway CPU s per 1,000 requests at %d clients", hi), Value: report.Number(mcpu, 2),
			Target: fmt.Sprintf("≤ %g: %s (Go proxy %s, cache hit %s)", goalMissCPUPer1k, passMiss(mcpu <= goalMissCPUPer1k), report.Number(cpu(pathGoProxy, hi), 2), report.Number(cpu(pathHit, hi), 2))},
		{Name: fmt.Sprintf("classified cache misses decided by the cascade's first stage (x-router-stage static), %d / %d clients", lo, hi),
			Value: share(both(lo).staticShare()) + " / " + share(both(hi).staticShare())},
		{Name: fmt.Sprintf("cache misses not classified at all (a classifier fallback: busy, timeout), %d / %d clients", lo, hi),
			Value: share(both(lo).fallbackShare()) + " / " + share(both(hi).fallbackShare()), Target: "a fallback waits at most routing.classify_budget (50 ms) and routes without a score"},
	}
}

// pairMs formats two values in ms as "a / b".
func pairMs(a, b float64) string { return report.Millis(a) + " / " + report.Millis(b) }

// msRange formats values in ms as "lo–hi ms" (one value when all are equal), "n/a" without
// any.
func msRange(xs []float64) string {
	xs = slices.DeleteFunc(slices.Clone(xs), math.IsNaN)
	if len(xs) == 0 {
		return "n/a"
	}
	lo, hi := slices.Min(xs), slices.Max(xs)
	if numMs(lo) == numMs(hi) {
		return report.Millis(lo)
	}
	return numMs(lo) + "–" + report.Millis(hi)
}

// numMs is report.Millis without the unit.
func numMs(v float64) string { return strings.TrimSuffix(report.Millis(v), " ms") }

// sideDetail renders the setup, the issue-style tables (each path's added p50 and p99 as
// the range over the repeats, CPU per 1,000 requests), the pooled table and where a miss's
// time goes by the gateway's Server-Timing.
func sideDetail(run sideRun, rows []sideRow, c *gatewayConfig, cfgPath string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "One simulated replica (%s) serves inside triage-bench, so no other process stands between it and the client; its CPU is not measured. "+
		"`triage-bench revproxy` (Go's httputil.ReverseProxy, 256 idle connections per host, SSE flushed at once) and the gateway (`%s`, config `%s`: both pools at the replica, every other setting the default, the shipped models) are child processes in front of it. "+
		"Every request is a chat completion, model auto, one user message, max_tokens %d. Cache misses (and the direct and Go-proxy paths) send a Dolly instruction of any of the eight categories with a reference tag appended that no other request had, e.g. `%s`; cache hits cycle over %d such prompts warmed before the run. "+
		"Each cell is %s requests (at %s clients) after 4 warm-up requests per client, from closed-loop clients (Go net/http, keep-alive, fresh connections per cell); within a cell the paths run one after another in an order rotated from cell to cell; %d repeats. "+
		"Latency is to the end of the body (non-stream) or to the first SSE event (stream TTFT); added = the path's percentile minus the direct path's, in the same repeat for the ranges and over all repeats pooled for the verdicts. "+
		"CPU is the proxying process's utime + stime from /proc/<pid>/stat (10 ms ticks) over the measured requests.\n\n",
		run.Replica, c.Bin, cfgPath, sideMaxTokens, refTag(sideKey{Repeat: 1, Clients: 1}, c.Seed, 123), sideHitPrompts, joinInts(c.SideRequests, " / ", ""), joinInts(c.SideClients, " / ", ""), c.SideRepeats)
	fmt.Fprintf(&b, "Load average (1, 5, 15 min) at the start and after each repeat: %s. A 10 ms timer in triage-bench fired late by p50 %s, p99 %s, max %s.\n\n",
		strings.Join(run.LoadAvg, "; "), report.Millis(run.TimerLate.P50), report.Millis(run.TimerLate.P99), report.Millis(run.TimerLate.Max))
	clients := c.SideClients
	for _, q := range []struct {
		name string
		f    func(sideRow) []float64
		abs  func(sideRow) float64
	}{
		{"p50", func(r sideRow) []float64 { return r.RepeatAddedP50 }, func(r sideRow) float64 { return r.Pooled.P50 }},
		{"p99", func(r sideRow) []float64 { return r.RepeatAddedP99 }, func(r sideRow) float64 { return r.Pooled.P99 }},
	} {
		writeSideTable(&b, rows, clients, q.name, q.f, q.abs)
	}
	writeSidePooled(&b, rows)
	writeSideTiming(&b, rows)
	return b.String()
}

// writeSideTable is one table in the layout: a row per path, a column per client
// count and mode holding the range of the added percentile over the repeats, and CPU.
func writeSideTable(b *strings.Builder, rows []sideRow, clients []int, q string, added func(sideRow) []float64, abs func(sideRow) float64) {
	fmt.Fprintf(b, "| added to the replica's own latency, %s (range over repeats) |", q)
	for _, n := range clients {
		fmt.Fprintf(b, " %d client(s), non-stream | %d client(s), stream TTFT |", n, n)
	}
	b.WriteString(" CPU s per 1k requests (" + joinInts(clients, " / ", "c") + ") |\n|---|")
	b.WriteString(strings.Repeat("---|", 2*len(clients)+1) + "\n")
	for _, path := range sidePaths {
		fmt.Fprintf(b, "| %s |", sideLabels[path])
		var cpus []string
		for _, n := range clients {
			for _, stream := range []bool{false, true} {
				r := findRow(rows, path, n, stream)
				if path == pathDirect {
					fmt.Fprintf(b, " %s |", report.Millis(abs(r)))
				} else {
					fmt.Fprintf(b, " %s |", msRange(added(r)))
				}
			}
			a, s := findRow(rows, path, n, false), findRow(rows, path, n, true)
			cpus = append(cpus, report.Number(sideRow{Path: path, CPUSec: a.CPUSec + s.CPUSec, Requests: a.Requests + s.Requests}.cpuPer1k(), 2))
		}
		fmt.Fprintf(b, " %s |\n", strings.Join(cpus, " / "))
	}
	b.WriteString("\n")
}

// writeSidePooled is every row over all repeats: the verdicts' numbers.
func writeSidePooled(b *strings.Builder, rows []sideRow) {
	b.WriteString("All repeats pooled:\n\n| path | clients | mode | requests | failed | p50 | p90 | p99 | max | added p50 | added p99 | CPU s / 1k | classified misses decided statically | classifier fallbacks | x-router-cache |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		mode := "non-stream"
		if r.Stream {
			mode = "stream TTFT"
		}
		added50, added99 := report.Millis(r.AddedP50), report.Millis(r.AddedP99)
		static, fallback := "", ""
		switch r.Path {
		case pathDirect:
			added50, added99 = "", ""
		case pathMiss:
			static = share(r.staticShare())
			fallback = share(r.fallbackShare())
		case pathHit:
			fallback = share(r.fallbackShare())
		}
		fmt.Fprintf(b, "| %s | %d | %s | %d | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.Path, r.Clients, mode, r.Requests, r.Failed,
			report.Millis(r.Pooled.P50), report.Millis(r.Pooled.P90), report.Millis(r.Pooled.P99), report.Millis(r.Pooled.Max),
			added50, added99, report.Number(r.cpuPer1k(), 2), static, fallback, report.Counts(r.Cache))
	}
	b.WriteString("\n")
}

// writeSideTiming shows where the gateway's time went on its answers, by its Server-Timing
// header (means over the answers): cache lookup, first stage, batcher queue, encoder,
// decision, and the reasons it gave.
func writeSideTiming(b *strings.Builder, rows []sideRow) {
	b.WriteString("The gateway's own account (Server-Timing, mean ms per answer; texts its encoder ran over the cells, from its metrics, beside the answers the encoder decided: a text whose caller gave up at routing.classify_budget still runs once its batch has started):\n\n" +
		"| path | clients | mode | cache | static | queue | inference | decision | encoder texts run / answers it decided | reasons |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		if r.Path != pathHit && r.Path != pathMiss {
			continue
		}
		mode := "non-stream"
		if r.Stream {
			mode = "stream"
		}
		t := r.TimingMean
		decided := "—" // a hit's stage is its cached result's
		if r.Path == pathMiss {
			decided = fmt.Sprint(r.Stages["encoder"])
		}
		fmt.Fprintf(b, "| %s | %d | %s | %.3f | %.3f | %.3f | %.3f | %.3f | %.0f / %s | %s |\n", r.Path, r.Clients, mode,
			t["cache"], t["static"], t["queue"], t["inference"], t["decision"], r.Encoded, decided, report.Counts(r.Reasons))
	}
	for _, r := range rows {
		if r.Failed > 0 {
			fmt.Fprintf(b, "\n%s, %d clients, stream %t: %d of %d requests failed.", r.Path, r.Clients, r.Stream, r.Failed, r.Requests)
		}
	}
	b.WriteString("\n")
}

// joinInts formats ns as "c1 / c16" (prefix "c", separator " / ").
func joinInts(ns []int, sep, prefix string) string {
	parts := make([]string, len(ns))
	for i, n := range ns {
		parts[i] = fmt.Sprintf("%s%d", prefix, n)
	}
	return strings.Join(parts, sep)
}
