package sweep

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/triage-gw/triage/bench/report"
	"github.com/triage-gw/triage/bench/trace"
	"github.com/triage-gw/triage/sim"
)

// PolicyReport is the policies subcommand's output.
type PolicyReport struct {
	Command   string       `json:"command"`
	Config    *sweepConfig `json:"config"`
	SimConfig sim.Config   `json:"-"`
	Replica   ReplicaJSON  `json:"replica"`
	// PerReplica is each replica's configuration where the scenario makes
	// them differ (absent for homogeneous).
	PerReplica []ReplicaJSON  `json:"per_replica,omitempty"`
	Trace      trace.Stats    `json:"trace_stats"`
	Machine    report.Machine `json:"machine"`
	Results    []PolicyResult `json:"results"`
	// SeedRuns are every seed's results with --seeds (the first is Results).
	SeedRuns []SeedRun `json:"seed_runs,omitempty"`
}

// ReplicaJSON is the replicas' configuration as results.json shows it.
type ReplicaJSON struct {
	MaxRunning      int     `json:"max_running"`
	MaxWaiting      int     `json:"max_waiting"`
	TTFTBase        string  `json:"ttft_base"`
	PrefillPerToken string  `json:"prefill_per_token"`
	DecodePerToken  string  `json:"decode_per_token"`
	Jitter          float64 `json:"jitter"`
	BlockChars      int     `json:"block_chars"`
	KVCacheBlocks   int     `json:"kv_cache_blocks"`
}

func NewReplicaJSON(c sim.Config) ReplicaJSON {
	return ReplicaJSON{MaxRunning: c.MaxRunning, MaxWaiting: c.MaxWaiting, TTFTBase: c.TTFTBase.String(),
		PrefillPerToken: c.PrefillPerToken.String(), DecodePerToken: c.DecodePerToken.String(), Jitter: c.Jitter,
		BlockChars: c.BlockChars, KVCacheBlocks: c.KVCacheBlocks}
}

// perReplicaJSON is every replica's configuration when the scenario makes
// them differ, nil when they are all c.Sim (the degrading scenario's
// replicas start alike; its schedule is in the config's degrade fields).
func perReplicaJSON(c *sweepConfig) []ReplicaJSON {
	if c.Scenario != scenarioHeterogeneous {
		return nil
	}
	var out []ReplicaJSON
	for _, sc := range replicaConfigs(c) {
		out = append(out, NewReplicaJSON(sc))
	}
	return out
}

// Write prints the markdown report to stdout and, with --out, writes
// results.json, results.csv and table.md there (and policies.png with
// --plot).
func (r *PolicyReport) Write(stdout, stderr io.Writer) error {
	md := r.Markdown()
	fmt.Fprint(stdout, md)
	c := r.Config
	if c.out == "" {
		return nil
	}
	js, err := report.JSON(r)
	if err != nil {
		return err
	}
	files := map[string][]byte{
		"results.json": js,
		"results.csv":  r.CSV(),
		"table.md":     []byte(md),
	}
	if err := report.WriteFiles(c.out, files); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "wrote %s/{results.json,results.csv,table.md}\n", c.out)
	if c.plot {
		png := filepath.Join(c.out, "policies.png")
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, c.python, c.plotScript, filepath.Join(c.out, "results.csv"), png)
		cmd.Stdout, cmd.Stderr = stderr, stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("plot: %s %s: %w", c.python, c.plotScript, err)
		}
		fmt.Fprintf(stderr, "wrote %s\n", png)
	}
	return nil
}

// Markdown renders the scenario header, the table and the target check.
func (r *PolicyReport) Markdown() string {
	var b strings.Builder
	c, s, t := r.Config, r.SimConfig, r.Trace
	tc := c.Trace
	fmt.Fprintf(&b, "# Replica policy sweep (%s replicas)\n\n", c.Scenario)
	fmt.Fprintf(&b, "- Command: `%s`\n", r.Command)
	fmt.Fprintf(&b, "- Machine: %s\n", r.Machine)
	fmt.Fprintf(&b, "- Replicas: %d simulated (package sim) per policy, fresh and cold for each policy, reached over HTTP on 127.0.0.1 through upstream.Pool (scrape interval %s, health checks off).\n",
		c.Replicas, c.ScrapeInterval)
	fmt.Fprintf(&b, "  Each: %d batch slots, queue %d, TTFT = %s + %s × uncached prompt tokens (cold %d-token system prompt ≈ %s), %s per output token, jitter ±%.0f%%, prefix cache %d blocks × %d bytes (%d tokens).\n",
		s.MaxRunning, s.MaxWaiting, s.TTFTBase, s.PrefillPerToken, tc.SystemTokens, s.PrefillDelay(tc.SystemTokens, 0).Round(time.Millisecond),
		s.DecodePerToken, 100*s.Jitter, s.KVCacheBlocks, s.BlockChars, s.KVCacheBlocks*s.BlockChars/4)
	b.WriteString(scenarioLines(c))
	fmt.Fprintf(&b, "- Trace (seed %d): %d streaming chat requests, Poisson arrivals at %.1f/s over %.1f s, %d sessions (%d heavy, %d requests from heavy sessions) with %d open at once and ≥ %s between a session's turns; a turn is sent only after the previous turn's answer ended.\n",
		tc.Seed, t.Requests, tc.Rate, t.Span, t.Sessions, t.HeavySessions, t.HeavyRequests, tc.ActiveSessions, tc.MinThink)
	fmt.Fprintf(&b, "  %d shared system prompts of %d tokens; light sessions %d–%d turns (context ≤ %d B), heavy %d–%d turns with a Dolly document ≤ %d B per turn; assistant history ≤ %d B per answer; %d users; max_tokens %d.\n",
		tc.SystemPrompts, tc.SystemTokens, tc.LightTurnsMin, tc.LightTurnsMax, tc.LightContext, tc.HeavyTurnsMin, tc.HeavyTurnsMax, tc.HeavyContext, tc.AnswerBytes, tc.Users, c.MaxTokens)
	fmt.Fprintf(&b, "  Input tokens per request: mean %.0f, p50 %.0f, p99 %.0f, max %.0f. Distinct %d-byte prefix blocks in the trace: %d (one replica holds %d).\n\n",
		t.InputTokens.Mean, t.InputTokens.P50, t.InputTokens.P99, t.InputTokens.Max, t.BlockChars, t.DistinctBlocks, s.KVCacheBlocks)

	base := r.find("least-request")
	tenants := c.Scenario == scenarioTenants
	fmt.Fprintf(&b, "| policy | ok / sent | TTFT mean ms | TTFT p50 ms | TTFT p99 ms | TTFT ≤ %s | E2E p50 ms | E2E p99 ms | prefix hit | load max/mean | Jain | requests per replica | mean TTFT vs least-request |", c.SLOTTFT)
	head, sep := scenarioColumns(c)
	b.WriteString(head + "\n|---|---|---|---|---|---|---|---|---|---|---|---|---|" + sep + "\n")
	for _, x := range r.Results {
		vs := "—"
		if base != nil && base.TTFT.Mean > 0 && x.Policy != base.Policy {
			vs = fmt.Sprintf("%+.1f%%", 100*(x.TTFT.Mean/base.TTFT.Mean-1))
		}
		per := make([]string, len(x.PerReplica))
		for i, n := range x.PerReplica {
			per[i] = strconv.Itoa(n)
		}
		fmt.Fprintf(&b, "| %s | %d / %d | %.0f | %.0f | %.0f | %.1f%% | %.0f | %.0f | %.1f%% | %.2f | %.3f | %s | %s |",
			x.Policy, x.OK, x.Requests, x.TTFT.Mean, x.TTFT.P50, x.TTFT.P99, 100*x.SLOAttainment, x.E2E.P50, x.E2E.P99,
			100*x.HitRate, x.LoadMaxMean, x.Jain, strings.Join(per, " / "), vs)
		b.WriteString(scenarioCells(c, &x) + "\n")
	}
	if c.Scenario == scenarioDegrading {
		b.WriteString("\nSlowed = the requests sent while replica 0 (r0) was slowed: how many of them went to it, and their TTFT and SLO attainment. ")
	}
	if tenants {
		b.WriteString("\nLight = the light users' requests, heavy = the heavy user's (" + trace.HeavyUser + "), each with its own TTFT percentiles and SLO attainment. ")
	}
	fmt.Fprintf(&b, "\nTTFT ≤ %s = SLO attainment: requests whose first token came within %s / requests sent (errors count as misses). ", c.SLOTTFT, c.SLOTTFT)
	b.WriteString("Prefix hit = prompt tokens served from the replicas' prefix caches / prompt tokens looked up (the replicas' own counters). " +
		"Load = requests served per replica; max/mean 1 and Jain 1 are perfectly even. Percentiles are nearest-rank.\n")
	var late []float64
	held := make([]string, len(r.Results))
	for i, x := range r.Results {
		late = append(late, x.TimerLate.P99)
		held[i] = strconv.Itoa(x.Held)
	}
	if len(late) > 0 {
		slices.Sort(late)
		fmt.Fprintf(&b, "Turns held back because the session's previous answer had not ended (per policy, in table order): %s. "+
			"Machine noise: a 10 ms timer in this process fired late by p99 %.1f–%.1f ms during the replays.\n",
			strings.Join(held, ", "), late[0], late[len(late)-1])
	}
	if errs := r.errorLines(); errs != "" {
		b.WriteString("\nErrors:\n" + errs)
	}
	if base != nil {
		b.WriteString("\n" + r.targetLine(base) + "\n")
	}
	b.WriteString(r.seedsTable())
	return b.String()
}

// scenarioColumns are the table's header cells and separator cells that
// only c's scenario has (tenants, degrading), "" for the others.
func scenarioColumns(c *sweepConfig) (head, sep string) {
	switch c.Scenario {
	case scenarioTenants:
		return fmt.Sprintf(" light TTFT p50 ms | light TTFT p99 ms | light TTFT ≤ %s | heavy TTFT p50 ms | heavy TTFT p99 ms | heavy TTFT ≤ %s |", c.SLOTTFT, c.SLOTTFT),
			"---|---|---|---|---|---|"
	case scenarioDegrading:
		return fmt.Sprintf(" slowed: sent to r0 | slowed: TTFT mean ms | slowed: TTFT p99 ms | slowed: TTFT ≤ %s |", c.SLOTTFT), "---|---|---|---|"
	case scenarioDisaggregated:
		return decodeColumns()
	}
	return "", ""
}

// scenarioCells are x's cells under scenarioColumns.
func scenarioCells(c *sweepConfig, x *PolicyResult) string {
	switch c.Scenario {
	case scenarioTenants:
		return tenantCells(x.Tenants)
	case scenarioDegrading:
		return degradeCells(x.Degraded)
	case scenarioDisaggregated:
		return decodeCells(c, x)
	}
	return ""
}

// tenantCells are the tenant columns of one table row.
func tenantCells(t *TenantResults) string {
	if t == nil {
		return " — | — | — | — | — | — |"
	}
	return fmt.Sprintf(" %.0f | %.0f | %.1f%% | %.0f | %.0f | %.1f%% |",
		t.Light.TTFT.P50, t.Light.TTFT.P99, 100*t.Light.SLOAttainment, t.Heavy.TTFT.P50, t.Heavy.TTFT.P99, 100*t.Heavy.SLOAttainment)
}

func (r *PolicyReport) find(policy string) *PolicyResult {
	for i := range r.Results {
		if r.Results[i].Policy == policy {
			return &r.Results[i]
		}
	}
	return nil
}

func (r *PolicyReport) errorLines() string {
	var b strings.Builder
	for _, x := range r.Results {
		if x.Errors > 0 {
			fmt.Fprintf(&b, "- %s: %d errors, e.g. %s\n", x.Policy, x.Errors, x.ErrorSample)
		}
	}
	return b.String()
}

// targetLine checks the sweep's target: the best cache-aware policy lowers
// mean TTFT by at least 30% against least-request while keeping per-replica
// load max/mean at or below 1.5.
func (r *PolicyReport) targetLine(base *PolicyResult) string {
	var best, bestBalanced *PolicyResult
	for i := range r.Results {
		x := &r.Results[i]
		if !slices.Contains(cacheAware, x.Policy) || x.OK == 0 {
			continue
		}
		if best == nil || x.TTFT.Mean < best.TTFT.Mean {
			best = x
		}
		if x.LoadMaxMean <= 1.5 && (bestBalanced == nil || x.TTFT.Mean < bestBalanced.TTFT.Mean) {
			bestBalanced = x
		}
	}
	if best == nil || base.TTFT.Mean == 0 {
		return "Target (best cache-aware policy: mean TTFT ≥ 30% below least-request, load max/mean ≤ 1.5): no cache-aware policy in this run."
	}
	cut := func(x *PolicyResult) float64 { return 100 * (1 - x.TTFT.Mean/base.TTFT.Mean) }
	verdict := func(x *PolicyResult) string {
		if cut(x) >= 30 && x.LoadMaxMean <= 1.5 {
			return "met"
		}
		return "missed"
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "Target (best cache-aware policy: mean TTFT ≥ 30%% below least-request with load max/mean ≤ 1.5): "+
		"lowest mean TTFT is %s, %.1f%% below least-request (%.0f vs %.0f ms), load max/mean %.2f — %s.",
		best.Policy, cut(best), best.TTFT.Mean, base.TTFT.Mean, best.LoadMaxMean, verdict(best))
	if bestBalanced != nil && bestBalanced != best {
		fmt.Fprintf(&b, " Best within the load bound: %s, %.1f%% below, load max/mean %.2f — %s.",
			bestBalanced.Policy, cut(bestBalanced), bestBalanced.LoadMaxMean, verdict(bestBalanced))
	}
	return b.String()
}

// CSV renders one row per policy, the plotting script's input.
func (r *PolicyReport) CSV() []byte {
	var buf bytes.Buffer
	w := csv.NewWriter(&buf)
	w.Write([]string{"policy", "requests", "ok", "errors", "held",
		"ttft_mean_ms", "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "slo_attainment",
		"e2e_mean_ms", "e2e_p50_ms", "e2e_p99_ms",
		"prefix_hit_rate", "prefill_tokens", "load_max_over_mean", "jain_index", "per_replica_requests",
		"light_ttft_p50_ms", "light_ttft_p99_ms", "light_slo_attainment", "heavy_ttft_p50_ms", "heavy_ttft_p99_ms", "heavy_slo_attainment",
		"slowed_requests", "slowed_to_slow_replica", "slowed_ttft_mean_ms", "slowed_ttft_p99_ms", "slowed_slo_attainment"})
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }
	for _, x := range r.Results {
		per := make([]string, len(x.PerReplica))
		for i, n := range x.PerReplica {
			per[i] = strconv.Itoa(n)
		}
		row := []string{x.Policy, strconv.Itoa(x.Requests), strconv.Itoa(x.OK), strconv.Itoa(x.Errors), strconv.Itoa(x.Held),
			f(x.TTFT.Mean), f(x.TTFT.P50), f(x.TTFT.P90), f(x.TTFT.P99), strconv.FormatFloat(x.SLOAttainment, 'f', 4, 64),
			f(x.E2E.Mean), f(x.E2E.P50), f(x.E2E.P99),
			strconv.FormatFloat(x.HitRate, 'f', 4, 64), strconv.FormatInt(x.PrefillTokens, 10),
			f(x.LoadMaxMean), strconv.FormatFloat(x.Jain, 'f', 4, 64), strings.Join(per, ";")}
		tenant := make([]string, 6) // empty outside the tenants scenario
		if t := x.Tenants; t != nil {
			tenant = []string{f(t.Light.TTFT.P50), f(t.Light.TTFT.P99), strconv.FormatFloat(t.Light.SLOAttainment, 'f', 4, 64),
				f(t.Heavy.TTFT.P50), f(t.Heavy.TTFT.P99), strconv.FormatFloat(t.Heavy.SLOAttainment, 'f', 4, 64)}
		}
		degraded := make([]string, 5) // empty outside the degrading scenario
		if d := x.Degraded; d != nil {
			degraded = []string{strconv.Itoa(d.Requests), strconv.Itoa(d.ToSlow), f(d.TTFT.Mean), f(d.TTFT.P99),
				strconv.FormatFloat(d.SLOAttainment, 'f', 4, 64)}
		}
		w.Write(append(append(row, tenant...), degraded...))
	}
	w.Flush()
	return buf.Bytes()
}
