package sweep

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/bench/dolly"
	"github.com/triage-gw/triage/bench/report"
	"github.com/triage-gw/triage/bench/stats"
	"github.com/triage-gw/triage/bench/trace"
	"github.com/triage-gw/triage/upstream/policy"
)

func TestPolicyConfigNames(t *testing.T) {
	for _, p := range sweepPolicies {
		pc, err := PolicyConfig(p, 1, 250*time.Millisecond)
		require.NoError(t, err, p)
		if strings.HasPrefix(p, "lmetric-") {
			require.Equal(t, "lmetric", pc.Name)
			require.Equal(t, strings.TrimPrefix(p, "lmetric-"), policy.SectionOf[policy.LMetricConfig](pc, "lmetric").Variant)
		}
	}
	_, err := PolicyConfig("nope", 1, 0)
	require.Error(t, err)
}

// TestRunOnePolicy replays a tiny trace against fast simulated replicas:
// every request answers, the replicas' counters add up and the sweep's
// own bookkeeping is consistent.
func TestRunOnePolicy(t *testing.T) {
	if testing.Short() {
		t.Skip("starts servers and replays for about a second")
	}
	c, err := parsePoliciesFlags([]string{"--duration", "1s", "--rate", "30", "--system-tokens", "200",
		"--ttft-base", "1ms", "--prefill-per-token", "1us", "--decode-per-token", "100us", "--max-tokens", "4",
		"--scrape-interval", "100ms", "--drain", "10s"}, io.Discard)
	require.NoError(t, err)
	tr, err := trace.Generate(c.Trace, testRows())
	require.NoError(t, err)
	reqs, err := Prepare(tr, c.Sim.Model, c.MaxTokens)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := runOnePolicy(ctx, c, "lmetric-unified", reqs, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	require.Equal(t, len(reqs), res.Requests)
	require.Equal(t, len(reqs), res.OK, res.ErrorSample)
	total := 0
	for _, n := range res.PerReplica {
		total += n
	}
	require.Equal(t, len(reqs), total)
	require.Greater(t, res.HitRate, 0.0, "later turns reuse earlier prefixes")
	require.Positive(t, res.TTFT.P50)
	require.GreaterOrEqual(t, res.E2E.P50, res.TTFT.P50)

	rep := &PolicyReport{Command: "test", Config: c, SimConfig: c.Sim, Trace: tr.Stats(64), Machine: report.DescribeMachine(), Results: []PolicyResult{res}}
	md := rep.Markdown()
	require.Contains(t, md, "| lmetric-unified |")
	require.Contains(t, string(rep.CSV()), "lmetric-unified,")
}

// testRows is a small synthetic Dolly: short rows and rows with long
// contexts, so heavy sessions have documents to draw.
func testRows() []dolly.Row {
	var rows []dolly.Row
	for i := range 40 {
		r := dolly.Row{
			Instruction: fmt.Sprintf("Question %d: what is item %d?", i, i),
			Response:    strings.Repeat(fmt.Sprintf("answer %d. ", i), 20),
			Category:    "open_qa",
		}
		if i%4 == 0 {
			r.Context = strings.Repeat(fmt.Sprintf("document %d sentence. ", i), 60)
		}
		rows = append(rows, r)
	}
	return rows
}

func TestParsePoliciesFlags(t *testing.T) {
	c, err := parsePoliciesFlags(nil, io.Discard)
	require.NoError(t, err)
	require.Equal(t, sweepPolicies, c.Policies)
	require.Equal(t, trace.DefaultConfig(), c.Trace)
	require.Equal(t, 16, c.Sim.DefaultMaxTokens, "the replicas answer --max-tokens tokens")

	c, err = parsePoliciesFlags([]string{"--policies", "random, lmetric-sticky,", "--max-tokens", "4096", "--seed", "3"}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, []string{"random", "lmetric-sticky"}, c.Policies)
	require.Equal(t, 4096, c.Sim.DefaultMaxTokens)
	require.GreaterOrEqual(t, c.Sim.MaxOutputTokens, 4096, "raised so the replicas accept it")
	require.EqualValues(t, 3, c.Trace.Seed)

	_, err = parsePoliciesFlags([]string{"--policies", "nope"}, io.Discard)
	require.ErrorContains(t, err, `policy "nope"`)

	_, err = parsePoliciesFlags([]string{"--replicas", "0", "--drain", "0", "--rate", "0"}, io.Discard)
	require.Error(t, err)
	require.Equal(t, []string{
		"policies: --replicas must be >= 1, got 0",
		"policies: --drain must be > 0, got 0s",
		"trace rate: must be a finite number > 0, got 0",
	}, strings.Split(err.Error(), "\n"), "every problem reported: the sweep's, then the trace's")
}

func TestSeeds(t *testing.T) {
	c, err := parsePoliciesFlags([]string{"--seeds", "4, 2,7", "--seed", "9"}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, []uint64{4, 2, 7}, c.Seeds)
	require.EqualValues(t, 4, c.Trace.Seed, "the first seed is the main table's")
	_, err = parsePoliciesFlags([]string{"--seeds", "1,x"}, io.Discard)
	require.EqualError(t, err, `policies: --seeds: "x" is not a seed (a non-negative integer)`)

	run := func(seed uint64, mean, p99, slo float64) SeedRun {
		return SeedRun{Seed: seed, Results: []PolicyResult{{Policy: "random", TTFT: stats.Summary{Mean: mean, P99: p99}, SLOAttainment: slo}}}
	}
	runs := []SeedRun{run(4, 100, 400, 0.9), run(2, 200, 500, 0.7), run(7, 150, 300, 0.8)}
	rep := &PolicyReport{Config: c, Results: runs[0].Results, SeedRuns: runs}
	md := rep.seedsTable()
	require.Contains(t, md, "## Across trace seeds 4, 2, 7")
	require.Contains(t, md, "| random | 150 (100–200) | 400 (300–500) | 80.0% (70.0–90.0%) |")
	require.Empty(t, (&PolicyReport{Config: c}).seedsTable(), "no seed table without --seeds")
}
