package gatewaybench

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/triage-gw/triage/bench/load"
	"github.com/triage-gw/triage/bench/promtext"
	"github.com/triage-gw/triage/bench/report"
	"github.com/triage-gw/triage/bench/stats"
	"github.com/triage-gw/triage/decision"
	"github.com/triage-gw/triage/router"
	"github.com/triage-gw/triage/server"
)

// reasonOrder lists decision reasons in table order; others follow sorted.
var reasonOrder = []decision.Reason{decision.ReasonSlowGranted, decision.ReasonFastModel, decision.ReasonLoadShedding,
	decision.ReasonSlowSaturated, decision.ReasonSlowUnhealthy}

// windowSeconds is the width of a query-process table row, in seconds of
// send time.
const windowSeconds = 1.0

// slowGauge is the slow-path semaphore and the decision threshold as the
// gateway's /metrics showed them at T seconds into the run.
type slowGauge struct {
	T          float64 `json:"t_s"`
	SlowActive float64 `json:"slow_active"`
	Threshold  float64 `json:"threshold"`
}

// reasonWindow counts the answers to the requests sent in one window.
type reasonWindow struct {
	n       int
	reasons map[string]int // successful answers by x-router-reason
	failed  int
}

// share is the percentage of the window's successful answers that had
// reason, 0 when there were none.
func (w reasonWindow) share(reason string) float64 {
	ok := w.n - w.failed
	if ok == 0 {
		return 0
	}
	return 100 * float64(w.reasons[reason]) / float64(ok)
}

// queryProcessRun is what the query-process scenario measured.
type queryProcessRun struct {
	clients, texts int
	d, ramp        time.Duration
	ss             []load.Sample
	wall           time.Duration
	gauges         []slowGauge

	windows   []reasonWindow // by send time
	total     map[string]int // successful answers by reason
	reasons   []string       // the reasons seen, in table order
	okLat     []time.Duration
	cacheHits int
}

func scenarioQueryProcess(ctx context.Context, env *gwEnv) (report.Scenario, error) {
	n := env.cfg.QPClients
	d := env.cfg.duration("query-process")
	res := report.Scenario{Name: "query-process", Title: fmt.Sprintf("%d concurrent clients on /v1/query-process, built-in simulated pools", n)}
	texts, err := NewTextSource(env.rows, env.cfg.Seed+7, false)
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

	run := &queryProcessRun{clients: n, texts: nTexts, d: d, ramp: time.Duration(float64(d) * env.cfg.QPRamp)}
	stopSampling := env.gw.PollMetrics(ctx, 250*time.Millisecond, func(since time.Duration, m promtext.Samples) {
		run.gauges = append(run.gauges, slowGauge{T: since.Seconds(), SlowActive: m.Sum("triage_slow_active"), Threshold: m.Sum("triage_decision_threshold")})
	})
	run.ss, run.wall = load.ClosedLoop{Workers: n, Ramp: run.ramp, Duration: d}.Run(ctx, func(ctx context.Context, _ int, seq int64) load.Sample {
		return load.PostJSON(ctx, c, url, texts.item(seq%int64(nTexts)).body(), false)
	})
	stopSampling()

	run.tally()
	if len(run.okLat) == 0 {
		return res, fmt.Errorf("no successful request: %s", load.FirstError(run.ss))
	}
	res.Summary, res.Detail, res.Data = run.summary(), run.detail(), run.data()
	return res, nil
}

// tally counts the answers by window and by reason.
func (r *queryProcessRun) tally() {
	r.windows = make([]reasonWindow, max(int(math.Ceil(r.d.Seconds()/windowSeconds)), 1))
	for i := range r.windows {
		r.windows[i].reasons = map[string]int{}
	}
	r.total = map[string]int{}
	for _, s := range r.ss {
		w := &r.windows[min(int(s.At.Seconds()/windowSeconds), len(r.windows)-1)]
		w.n++
		if !s.OK() {
			w.failed++
			continue
		}
		r.okLat = append(r.okLat, s.Latency)
		reason := s.Header.Get(server.HeaderReason)
		if reason == "" {
			reason = "(none)"
		}
		w.reasons[reason]++
		r.total[reason]++
		if s.Header.Get(server.HeaderCache) == router.CacheHit {
			r.cacheHits++
		}
	}
	r.reasons = orderReasons(r.total)
}

// orderReasons returns the reasons that occur in total: those of
// reasonOrder in its order, then the others sorted.
func orderReasons(total map[string]int) []string {
	var reasons []string
	for _, r := range reasonOrder {
		if total[string(r)] > 0 {
			reasons = append(reasons, string(r))
		}
	}
	var extra []string
	for r := range total {
		if !slices.Contains(reasonOrder, decision.Reason(r)) {
			extra = append(extra, r)
		}
	}
	sort.Strings(extra)
	return append(reasons, extra...)
}

// gaugeAt returns the last gauges sampled in [t0, t1], NaN if none was.
func (r *queryProcessRun) gaugeAt(t0, t1 float64) (act, thr float64) {
	act, thr = math.NaN(), math.NaN()
	for _, g := range r.gauges {
		if g.T >= t0 && g.T <= t1 {
			act = g.SlowActive // last sample in the window
			thr = g.Threshold
		}
	}
	return act, thr
}

// peakSlowActive is the highest slow_active sampled, 0 if none was.
func (r *queryProcessRun) peakSlowActive() float64 {
	peak := 0.0
	for _, g := range r.gauges {
		peak = max(peak, g.SlowActive)
	}
	return peak
}

func (r *queryProcessRun) summary() []report.Metric {
	okN := len(r.okLat)
	totalShare := func(reason string) float64 { return 100 * float64(r.total[reason]) / float64(okN) }
	first, last := r.windows[0], r.windows[len(r.windows)-1]
	return []report.Metric{
		{Name: "requests/s, latency p50 / p99", Value: fmt.Sprintf("%.1f, %s", float64(okN)/r.wall.Seconds(), report.P50P99(stats.Summarize(r.okLat))), Target: fmt.Sprintf("%d clients ramped up over %s", r.clients, r.ramp)},
		{Name: "load_shedding share: first second → last second", Value: fmt.Sprintf("%.0f%% → %.0f%%", first.share(string(decision.ReasonLoadShedding)), last.share(string(decision.ReasonLoadShedding))),
			Target: fmt.Sprintf("rises as the slow semaphore fills (peak slow_active %.0f)", r.peakSlowActive())},
		{Name: "decisions overall", Value: sharesString(r.reasons, totalShare)},
	}
}

func (r *queryProcessRun) detail() string {
	var b strings.Builder
	okN := len(r.okLat)
	lat := stats.Summarize(r.okLat)
	fmt.Fprintf(&b, "%d requests in %.1f s (%d ok, %d failed). The texts cycle over %d Dolly texts of the four categories, warmed into the result cache first, so the classifier is out of the way and each request is decided again under the current slow-pool load (%d of the answers were cache hits). Latency mean %s, p50 %s, p99 %s.\n\n",
		len(r.ss), r.wall.Seconds(), okN, len(r.ss)-okN, r.texts, r.cacheHits, report.Millis(lat.Mean), report.Millis(lat.P50), report.Millis(lat.P99))
	fmt.Fprintf(&b, "Clients join one by one over the first %s, then all %d run until %s. Share of decisions by reason (x-router-reason) per second of send time, with the slow semaphore (triage_slow_active, peak %d) and the threshold sampled from /metrics at the second's end:\n\n",
		r.ramp, r.clients, r.d, int(r.peakSlowActive()))
	r.writeWindows(&b)
	if len(r.ss) > okN {
		fmt.Fprintf(&b, "\nFailures: %s, e.g. %s.\n", report.Counts(load.StatusCounts(r.ss)), load.FirstError(r.ss))
	}
	return b.String()
}

// writeWindows renders the table of reason shares per window.
func (r *queryProcessRun) writeWindows(b *strings.Builder) {
	b.WriteString("| t (s) | answers |")
	for _, reason := range r.reasons {
		b.WriteString(" " + reason + " |")
	}
	b.WriteString(" failed | slow_active | threshold |\n|---|---|")
	for range r.reasons {
		b.WriteString("---|")
	}
	b.WriteString("---|---|---|\n")
	for i, w := range r.windows {
		t0 := float64(i) * windowSeconds
		fmt.Fprintf(b, "| %.0f–%.0f | %d |", t0, t0+windowSeconds, w.n)
		for _, reason := range r.reasons {
			fmt.Fprintf(b, " %.0f%% |", w.share(reason))
		}
		act, thr := r.gaugeAt(t0, t0+windowSeconds)
		fmt.Fprintf(b, " %d | %s | %s |\n", w.failed, report.Number(act, 0), report.Number(thr, 3))
	}
}

func (r *queryProcessRun) data() map[string]any {
	series := make([]map[string]any, len(r.windows))
	for i, w := range r.windows {
		series[i] = map[string]any{"t_s": float64(i) * windowSeconds, "answers": w.n, "failed": w.failed, "reasons": w.reasons}
	}
	return map[string]any{"requests": len(r.ss), "ok": len(r.okLat), "latency": stats.Summarize(r.okLat), "reasons": r.total, "windows": series, "gauges": r.gauges,
		"cache_hits": r.cacheHits, "status": load.StatusCounts(r.ss)}
}

func sharesString(reasons []string, share func(string) float64) string {
	parts := make([]string, len(reasons))
	for i, r := range reasons {
		parts[i] = fmt.Sprintf("%s %.0f%%", r, share(r))
	}
	return strings.Join(parts, ", ")
}
