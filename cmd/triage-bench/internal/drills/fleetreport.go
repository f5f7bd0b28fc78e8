package drills

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/triage-gw/triage/bench/report"
	"github.com/triage-gw/triage/bench/trace"
	"github.com/triage-gw/triage/cmd/triage-bench/internal/sweep"
)

// FleetReport is the fleet subcommand's output.
type FleetReport struct {
	Command  string            `json:"command"`
	Machine  report.Machine    `json:"machine"`
	Config   *fleetConfig      `json:"config"`
	Budget   []modeResult      `json:"budget_cache_latency"` // (a), (b), (d): local, then fleet
	Latency1 *latencyResult    `json:"latency_one_gateway_fleet_mode,omitempty"`
	Drills   []drillResult     `json:"drills"`
	Trace    trace.Stats       `json:"trace_stats"`
	Replica  sweep.ReplicaJSON `json:"trace_replica"`
	Affinity []traceResult     `json:"affinity"` // (c): per policy, local, fleet, affinity off
}

// Write prints the markdown to stdout and, with out, writes results.json and table.md there.
func (r *FleetReport) Write(stdout, stderr io.Writer, out string) error {
	return report.Publish(stdout, stderr, out, r, r.Markdown())
}

// Markdown renders the header, the summary against the targets, the drills and the details.
func (r *FleetReport) Markdown() string {
	var b strings.Builder
	c := r.Config
	b.WriteString("# Fleet mode\n\n")
	fmt.Fprintf(&b, "- Command: `%s`\n- Machine: %s\n", r.Command, r.Machine)
	fmt.Fprintf(&b, "- Processes, all on this machine and 127.0.0.1: one redis-server, mockllm replicas, 1 or %d gateways (`%s`) with generated configs, "+
		"and this program as the client, sending each request to the next gateway in turn.\n\n", c.Gateways, c.Bin)
	r.writeSummary(&b)
	r.writeDrills(&b)
	r.writeBudgetDetail(&b)
	r.writeTraceDetail(&b)
	return b.String()
}

func pct(v float64) string { return fmt.Sprintf("%.1f%%", 100*v) }

// writeSummary is the table of (a)–(d) against their targets.
func (r *FleetReport) writeSummary(b *strings.Builder) {
	lm, fm, nm := r.Config.modes()
	fmt.Fprintf(b, "## Summary\n\n| measure | %s | %s | %s | target |\n|---|---|---|---|---|\n", lm.Name, fm.Name, nm.Name)
	if len(r.Budget) == 2 {
		l, f := r.Budget[0], r.Budget[1]
		fmt.Fprintf(b, "| (a) most slow requests in flight fleet-wide (mean) | %d of %d (%.1f) | %d of %d (%.1f) | | never above %d: %s |\n",
			l.Budget.MaxActive, l.Budget.MaxSlow, l.Budget.MeanActive, f.Budget.MaxActive, f.Budget.MaxSlow, f.Budget.MeanActive,
			r.Config.MaxSlow, report.Verdict(f.Budget.MaxActive <= f.Budget.MaxSlow && l.Budget.MaxActive <= l.Budget.MaxSlow))
		if sa, na := f.Budget.SyncAge, f.Budget.SnapshotAge; sa.N > 0 {
			fmt.Fprintf(b, "| (a) staleness of a gateway's view of the fleet, p50 / p99 / max over %d samples: last budget sync; freshest load snapshot | | %.0f / %.0f / %.0f ms; %.0f / %.0f / %.0f ms | | stated: ≤ budget.sync_interval, ≤ affinity.load_interval, + delivery |\n",
				sa.N, sa.P50, sa.P99, sa.Max, na.P50, na.P99, na.Max)
		}
		d := 100 * (f.Cache.HitRate - l.Cache.HitRate)
		fmt.Fprintf(b, "| (b) result-cache hit rate | %s | %s (%d of %d hits shared) | | within 5 points of 1 gateway (%+.1f): %s |\n",
			pct(l.Cache.HitRate), pct(f.Cache.HitRate), f.Cache.SharedHits, f.Cache.Hits, d, report.Verdict(math.Abs(d) <= 5))
	}
	runs := ""
	if r.Config.AffinityRuns > 1 {
		runs = fmt.Sprintf(" (median of %d runs)", r.Config.AffinityRuns)
	}
	for _, p := range r.Config.Policies {
		hl, tl := r.affinityMedians(p, lm.Name)
		hf, tf := r.affinityMedians(p, fm.Name)
		hn, tn := r.affinityMedians(p, nm.Name)
		if math.IsNaN(hl) {
			continue
		}
		dh := 100 * (hf - hl)
		fmt.Fprintf(b, "| (c) prefix-cache hit rate, %s%s | %s | %s | %s | within 5 points (%+.1f): %s |\n",
			p, runs, pct(hl), pct(hf), pct(hn), dh, report.Verdict(math.Abs(dh) <= 5))
		dt := tf/tl - 1
		fmt.Fprintf(b, "| (c) mean TTFT, %s%s | %s | %s | %s | within 10%% (%+.1f%%): %s |\n",
			p, runs, report.Millis(tl), report.Millis(tf), report.Millis(tn), 100*dt, report.Verdict(math.Abs(dt) <= 0.10))
	}
	if len(r.Budget) == 2 {
		l, f := r.Budget[0].Latency, r.Budget[1].Latency
		dp50, dp99 := f.AddedP50-l.AddedP50, f.AddedP99-l.AddedP99
		fmt.Fprintf(b, "| (d) TTFT added by the gateway, p50 / p99 | %s / %s | %s / %s | | fleet − local at p50 ≤ 1 ms (%s / %s): %s |\n",
			report.Millis(l.AddedP50), report.Millis(l.AddedP99), report.Millis(f.AddedP50), report.Millis(f.AddedP99),
			signedMillis(dp50), signedMillis(dp99), report.Verdict(dp50 <= 1))
		if f1 := r.Latency1; f1 != nil {
			dp50, dp99 = f1.AddedP50-l.AddedP50, f1.AddedP99-l.AddedP99
			fmt.Fprintf(b, "| (d) the same, fleet mode on 1 gateway (Redis, budget, cache, affinity; no other gateway) | %s / %s | %s / %s | | fleet − local at p50 ≤ 1 ms (%s / %s): %s |\n",
				report.Millis(l.AddedP50), report.Millis(l.AddedP99), report.Millis(f1.AddedP50), report.Millis(f1.AddedP99),
				signedMillis(dp50), signedMillis(dp99), report.Verdict(dp50 <= 1))
		}
	}
	b.WriteString("\n")
}

func signedMillis(v float64) string {
	if v < 0 {
		return "−" + report.Millis(-v)
	}
	return "+" + report.Millis(v)
}

// writeDrills is the drills' table.
func (r *FleetReport) writeDrills(b *strings.Builder) {
	if len(r.Drills) == 0 {
		return
	}
	b.WriteString("## Drills\n\nEach drill runs the (a) load over a fresh fleet. The budget is whole when the slots granted to the live gateways sum to the budget again.\n\n| drill | requests | ok | failed while streaming | failed before streaming (target 0) | rerouted by the client | most slow in flight | fallback to local | rejoined | dead gateway reaped | budget whole again |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, d := range r.Drills {
		secs := func(v float64) string {
			if v <= 0 {
				return ""
			}
			return fmt.Sprintf("%.2f s", v)
		}
		whole := fmt.Sprintf("never short (%d slots granted throughout)", d.MaxSlow)
		switch {
		case d.WholeS < 0:
			whole = fmt.Sprintf("not by the end (%d slots granted)", d.MinGrants)
		case d.WholeS > 0:
			whole = fmt.Sprintf("%.2f s after the fault (down to %d slots granted)", d.WholeS, d.MinGrants)
		}
		fmt.Fprintf(b, "| %s | %d | %d | %d | %d | %d | %d of %d | %s | %s | %s | %s |\n", d.Drill, d.Load.Requests, d.Load.OK,
			d.Load.FailedStreaming, d.Load.FailedOther, d.Load.Rerouted, d.MaxActive, d.MaxSlow, secs(d.FallbackS), secs(d.RejoinS), secs(d.ReapedS), whole)
	}
	b.WriteString("\n")
	for _, d := range r.Drills {
		fmt.Fprintf(b, "- %s: fault at %.1f s", d.Drill, d.FaultAt)
		if d.RestartAt > 0 {
			fmt.Fprintf(b, ", redis-server started again at %.1f s", d.RestartAt)
		}
		lines := report.Counts(d.LogLines)
		if lines == "" {
			lines = "none about Redis or affinity"
		}
		fmt.Fprintf(b, "; gateway log lines during the drill: %s.", lines)
		if d.Load.FirstError != "" {
			fmt.Fprintf(b, " First failure: `%.160s`.", d.Load.FirstError)
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
	for _, d := range r.Drills {
		writeTimeline(b, d)
	}
}

// writeTimeline renders a drill's polls in half-second windows.
func writeTimeline(b *strings.Builder, d drillResult) {
	if len(d.Timeline) == 0 {
		return
	}
	fmt.Fprintf(b, "### %s, half-second windows\n\n| from s | slow in flight min–max | grants summed | gateways answering | gateways with Redis up |\n|---|---|---|---|---|\n", d.Drill)
	for _, w := range d.Timeline {
		fmt.Fprintf(b, "| %.1f | %d–%d | %d | %d | %d |\n", w.From, w.MinActive, w.MaxActive, w.Grants, w.Live, w.Up)
	}
	b.WriteString("\n")
}

// window is a half second of a drill's polls: the range of slow requests held, and the
// grants, answering gateways and gateways with Redis up at its last poll.
type window struct {
	From      float64 `json:"from_s"`
	MinActive int     `json:"min_active"`
	MaxActive int     `json:"max_active"`
	Grants    int     `json:"grants"`
	Live      int     `json:"live"`
	Up        int     `json:"fleet_up"`
}

func windows(polls []slowPoll) []window {
	var out []window
	for _, p := range polls {
		from := math.Floor(p.At*2) / 2
		if len(out) == 0 || out[len(out)-1].From != from {
			out = append(out, window{From: from, MinActive: p.Active})
		}
		w := &out[len(out)-1]
		w.MinActive, w.MaxActive = min(w.MinActive, p.Active), max(w.MaxActive, p.Active)
		w.Grants, w.Live, w.Up = p.Grants, p.Live, p.Up
	}
	return out
}

// writeBudgetDetail describes (a), (b) and (d) per mode.
func (r *FleetReport) writeBudgetDetail(b *strings.Builder) {
	if len(r.Budget) == 0 {
		return
	}
	c := r.Config
	fmt.Fprintf(b, "## (a), (b), (d) in detail\n\nReplicas: %d slow and 1 fast mockllm, no prefill cost, no jitter, 20 ms per output token. "+
		"Every gateway runs lmetric-sticky in both pools and decides with decision.base 0.01, alpha 0, so every request wants the slow pool "+
		"and the budget (decision.max_slow_concurrency %d, the whole fleet's in fleet mode) alone decides; what it refuses is shed to the fast pool. "+
		"Fleet mode uses the defaults (budget sync 100 ms, lease 5 s, affinity load snapshots every 100 ms).\n\n", c.SlowReplicas, c.MaxSlow)
	fmt.Fprintf(b, "- (a): %d clients, closed loop, %s, streaming chat with max_tokens %d over 64 texts warmed into every gateway's cache. "+
		"Every %s each gateway's /metrics (triage_slow_active in local mode, triage_fleet_budget_local_active in fleet mode) and each slow replica's "+
		"(running + waiting) are scraped at once and summed.\n", c.BudgetClients, c.BudgetDuration, c.BudgetTokens, c.Poll)
	fmt.Fprintf(b, "- (b): %d new texts, each sent %d times in one shuffled order by %d clients to /v1/classify; a hit is `\"cache\":\"hit\"` in the answer. "+
		"Every text misses once at best, so the ideal hit rate is %s.\n", c.CacheTexts, c.CacheRepeats, c.CacheClients, pct(1-1/float64(c.CacheRepeats)))
	fmt.Fprintf(b, "- (d): %d clients for %s, each alternating one streaming request (6,000-character system prompt, max_tokens 2) direct to a slow replica and the same through gateway 0; "+
		"added = gateway percentile − direct percentile.\n\n", c.LatencyClients, c.LatencyTime)
	b.WriteString("| mode | (a) requests | slow path | shed to fast | failed | most at the slow replicas | polls | (b) ok | hits | shared hits |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, m := range r.Budget {
		a, ch := m.Budget, m.Cache
		fmt.Fprintf(b, "| %s | %d | %d | %d | %d | %d | %d | %d | %d | %d |\n", m.Mode.Name, a.Load.Requests, a.Load.Slow, a.Load.OK-a.Load.Slow,
			a.Load.FailedOther+a.Load.FailedStreaming, a.MaxReplicas, a.Polls, ch.OK, ch.Hits, ch.SharedHits)
	}
	b.WriteString("\n| (d) mode | direct TTFT p50 / p99 | through gateway 0 p50 / p99 | added p50 / p99 | budget top-ups | picks published | failed |\n|---|---|---|---|---|---|---|\n")
	lat := []latencyResult{}
	names := []string{}
	for _, m := range r.Budget {
		lat, names = append(lat, m.Latency), append(names, m.Mode.Name)
	}
	if r.Latency1 != nil {
		lat, names = append(lat, *r.Latency1), append(names, "1 gateway (fleet mode)")
	}
	for i, l := range lat {
		fmt.Fprintf(b, "| %s | %s | %s | %s / %s | %.0f | %.0f | %d |\n", names[i], report.P50P99(l.Direct), report.P50P99(l.Gateway),
			report.Millis(l.AddedP50), report.Millis(l.AddedP99), l.Topups, l.Picks, l.Failed)
	}
	b.WriteString("\n")
}

// writeTraceDetail describes (c).
func (r *FleetReport) writeTraceDetail(b *strings.Builder) {
	if len(r.Affinity) == 0 {
		return
	}
	t, rp := r.Trace, r.Replica
	fmt.Fprintf(b, "## (c) in detail\n\nThe trace of `triage-bench policies` (seed %d): %d requests, %d sessions (%d heavy), input tokens mean %.0f, %d distinct %d-byte blocks, "+
		"replayed through the gateways, each request to the next gateway in turn, with `x-session-id` set to its session. "+
		"%d fresh mockllm replicas per run (TTFT %s + %s per uncached prompt token, %s per output token, %d slots, prefix cache of %d %d-byte blocks) "+
		"are both pools; decision.base 0.9999 keeps (nearly) every turn on the fast pool. Every turn's classification is warmed into every gateway's cache first, "+
		"so TTFT compares routing, not inference. Prefix hit rate is the replicas' own counters (vllm:prefix_cache_hits / queries).\n\n",
		r.Config.Trace.Seed, t.Requests, t.Sessions, t.HeavySessions, t.InputTokens.Mean, t.DistinctBlocks, t.BlockChars,
		r.Config.TraceReplicas, rp.TTFTBase, rp.PrefillPerToken, rp.DecodePerToken, rp.MaxRunning, rp.KVCacheBlocks, rp.BlockChars)
	b.WriteString("| policy | mode | run | ok / sent | TTFT mean | TTFT p50 / p99 | prefix hit | load max/mean | slow path | held | rerouted |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, a := range r.Affinity {
		fmt.Fprintf(b, "| %s | %s | %d | %d / %d | %s | %s | %s | %.2f | %d | %d | %d |\n", a.Policy, a.Mode.Name, a.Run, a.OK, a.Requests,
			report.Millis(a.TTFT.Mean), report.P50P99(a.TTFT), pct(a.HitRate), a.LoadMaxMean, a.SlowPath, a.Held, a.Rerouted)
	}
	for _, a := range r.Affinity {
		if a.ErrorSample != "" {
			fmt.Fprintf(b, "\n%s, %s: %d errors, e.g. `%.200s`", a.Policy, a.Mode.Name, a.Errors, a.ErrorSample)
		}
	}
	b.WriteString("\n")
}

// printDrill is a drill's progress line.
func (e *fleetEnv) printDrill(d drillResult) {
	fmt.Fprintf(e.stderr, "    drill %s: %d requests, %d failed while streaming, %d failed otherwise, %d rerouted; most slow in flight %d of %d; fallback %.2f s, rejoin %.2f s, reaped %.2f s, whole again %.2f s\n",
		d.Drill, d.Load.Requests, d.Load.FailedStreaming, d.Load.FailedOther, d.Load.Rerouted, d.MaxActive, d.MaxSlow, d.FallbackS, d.RejoinS, d.ReapedS, d.WholeS)
}

// affinityMedians returns the median over (c)'s runs of policy in the mode named mode of the
// prefix hit rate and of the mean TTFT (ms). A median, because on a shared machine one run
// in a stall (TTFT several times the others') would move a mean of three runs by half.
func (r *FleetReport) affinityMedians(policy, mode string) (hit, ttft float64) {
	var hits, ttfts []float64
	for _, a := range r.Affinity {
		if a.Policy == policy && a.Mode.Name == mode {
			hits, ttfts = append(hits, a.HitRate), append(ttfts, a.TTFT.Mean)
		}
	}
	return median(hits), median(ttfts)
}

// median is the middle value, the mean of the two middle ones for an even count, NaN for none.
func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	v = slices.Clone(v)
	slices.Sort(v)
	if n := len(v); n%2 == 0 {
		return (v[n/2-1] + v[n/2]) / 2
	}
	return v[len(v)/2]
}
