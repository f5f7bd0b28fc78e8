package main

import (
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/bench/stats"
	"github.com/triage-gw/triage/bench/trace"
)

func TestReplicaConfigs(t *testing.T) {
	c, err := parsePoliciesFlags(nil, io.Discard)
	require.NoError(t, err)
	require.Equal(t, scenarioHomogeneous, c.Scenario, "today's sweep stays the default")
	base := c.Sim
	for i, sc := range replicaConfigs(c) {
		require.NoError(t, sc.Validate())
		require.Equal(t, c.Trace.Seed*1000+uint64(i), sc.Seed)
		sc.Name, sc.Seed = base.Name, base.Seed
		require.Equal(t, base, sc, "homogeneous replica %d is the sweep's replica", i)
	}

	c, err = parsePoliciesFlags([]string{"--scenario", "heterogeneous", "--replicas", "3"}, io.Discard)
	require.NoError(t, err)
	rc := replicaConfigs(c)
	require.Len(t, rc, 3)
	for _, sc := range rc {
		require.NoError(t, sc.Validate())
	}
	require.Equal(t, "replica-0", rc[0].Name)
	require.Equal(t, 2*base.PrefillPerToken, rc[0].PrefillPerToken, "a slower GPU prefills slower too")
	require.Equal(t, 2*base.DecodePerToken, rc[0].DecodePerToken)
	require.Equal(t, base.TTFTBase, rc[0].TTFTBase, "the fixed overhead is not per token")
	require.Equal(t, base.KVCacheBlocks, rc[0].KVCacheBlocks)
	require.Equal(t, base.KVCacheBlocks/2, rc[1].KVCacheBlocks)
	require.Equal(t, base.PrefillPerToken, rc[1].PrefillPerToken)
	require.Equal(t, base.DecodePerToken, rc[1].DecodePerToken)
	rc[2].Name, rc[2].Seed = base.Name, base.Seed
	require.Equal(t, base, rc[2], "replicas after the first two are unchanged")
}

func TestSLOAttainment(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name  string
		ttfts []time.Duration
		total int
		want  float64
	}{
		{"all within", []time.Duration{10 * ms, 250 * ms}, 2, 1},
		{"the target itself meets it", []time.Duration{250 * ms}, 1, 1},
		{"one over", []time.Duration{10 * ms, 251 * ms}, 2, 0.5},
		{"errors count as misses", []time.Duration{10 * ms}, 4, 0.25},
		{"nothing answered", nil, 3, 0},
		{"nothing sent", nil, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.InDelta(t, tc.want, sloAttainment(tc.ttfts, tc.total, 250*ms), 1e-12)
		})
	}
}

func TestParseScenarioFlags(t *testing.T) {
	c, err := parsePoliciesFlags(nil, io.Discard)
	require.NoError(t, err)
	require.Equal(t, defaultSLOTTFT, c.SLOTTFT)

	c, err = parsePoliciesFlags([]string{"--scenario", "heterogeneous", "--slo-ttft", "400ms"}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, scenarioHeterogeneous, c.Scenario)
	require.Equal(t, 400*time.Millisecond, c.SLOTTFT)

	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--scenario", "mixed"}, []string{`policies: --scenario must be one of homogeneous, heterogeneous, got "mixed"`}},
		{[]string{"--scenario", "heterogeneous", "--replicas", "1"}, []string{"policies: --scenario heterogeneous needs --replicas >= 2, got 1"}},
		{[]string{"--slo-ttft", "0s"}, []string{"policies: --slo-ttft must be > 0, got 0s"}},
		{[]string{"--scenario", "", "--slo-ttft", "-1ms"}, []string{
			`policies: --scenario must be one of homogeneous, heterogeneous, got ""`,
			"policies: --slo-ttft must be > 0, got -1ms",
		}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, err := parsePoliciesFlags(tc.args, io.Discard)
			require.Error(t, err)
			require.Equal(t, tc.want, strings.Split(err.Error(), "\n"))
		})
	}
}

// TestScenarioReport checks that the report names the scenario, shows the
// SLO column in every format and lists the replicas only where they differ.
func TestScenarioReport(t *testing.T) {
	res := []PolicyResult{{Policy: "least-request", Requests: 4, OK: 4, SLOAttainment: 0.75,
		TTFT: stats.Summary{Mean: 100}, PerReplica: []int{1, 1, 1, 1}}}
	for _, scenario := range scenarios {
		t.Run(scenario, func(t *testing.T) {
			c, err := parsePoliciesFlags([]string{"--scenario", scenario}, io.Discard)
			require.NoError(t, err)
			rep := &PolicyReport{Command: "test", Config: c, SimConfig: c.Sim, Replica: newReplicaJSON(c.Sim),
				PerReplica: perReplicaJSON(c), Trace: trace.Stats{BlockChars: 64}, Results: res}
			md := rep.Markdown()
			require.Contains(t, md, "("+scenario+" replicas)")
			require.Contains(t, md, "| TTFT ≤ 250ms |")
			require.Contains(t, md, "| 75.0% |")
			require.Contains(t, string(rep.CSV()), ",slo_attainment,")
			require.Contains(t, string(rep.CSV()), ",0.7500,")
			js, err := json.Marshal(rep)
			require.NoError(t, err)
			require.Contains(t, string(js), `"slo_attainment":0.75`)
			require.Contains(t, string(js), `"scenario":"`+scenario+`"`)
			if scenario == scenarioHomogeneous {
				require.NotContains(t, md, "Scenario heterogeneous")
				require.Nil(t, rep.PerReplica)
				return
			}
			require.Contains(t, md, "replica 0 is a GPU twice as slow per token (prefill 300µs and decode 20ms per token")
			require.Contains(t, md, "replica 1 has half the prefix cache (750 blocks")
			require.Len(t, rep.PerReplica, 4)
			require.Equal(t, "20ms", rep.PerReplica[0].DecodePerToken)
			require.Equal(t, 750, rep.PerReplica[1].KVCacheBlocks)
		})
	}
}
