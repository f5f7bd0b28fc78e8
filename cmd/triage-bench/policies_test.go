package main

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/triage-gw/triage/upstream/policy"
)

func TestPolicyConfigNames(t *testing.T) {
	for _, p := range sweepPolicies {
		pc, err := policyConfig(p, 1)
		require.NoError(t, err, p)
		if strings.HasPrefix(p, "lmetric-") {
			require.Equal(t, "lmetric", pc.Name)
			require.Equal(t, strings.TrimPrefix(p, "lmetric-"), policy.SectionOf[policy.LMetricConfig](pc, "lmetric").Variant)
		}
	}
	_, err := policyConfig("nope", 1)
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
	tr, err := GenerateTrace(c.Trace, testRows())
	require.NoError(t, err)
	reqs, err := prepare(tr, c.Sim.Model, c.MaxTokens)
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

	rep := &PolicyReport{Command: "test", Config: c, SimConfig: c.Sim, Trace: tr.Stats(64), Machine: Machine(), Results: []PolicyResult{res}}
	md := rep.Markdown()
	require.Contains(t, md, "| lmetric-unified |")
	require.Contains(t, string(rep.CSV()), "lmetric-unified,")
}
