package main

import (
	"fmt"
	"time"

	"github.com/triage-gw/triage/sim"
)

// Sweep scenarios: how the replicas of one run differ from each other.
const (
	// scenarioHomogeneous gives every replica the same configuration.
	scenarioHomogeneous = "homogeneous"
	// scenarioHeterogeneous makes replica 0 a slower GPU (both per-token
	// costs doubled) and gives replica 1 half the prefix cache; the others
	// stay as configured. It needs at least 2 replicas.
	scenarioHeterogeneous = "heterogeneous"
)

// scenarios are the values --scenario accepts.
var scenarios = []string{scenarioHomogeneous, scenarioHeterogeneous}

// defaultSLOTTFT is --slo-ttft's default: a little above the nominal cost
// of one cold 1,500-token system prompt on a default sweep replica
// (20 ms + 1,500 × 150 µs ≈ 245 ms). A request that waits in no queue and
// runs on a full-speed replica meets it even when its prefix is cold;
// one that queues, or prefills cold on a slowed replica, misses it.
const defaultSLOTTFT = 250 * time.Millisecond

// replicaConfigs returns the configuration of each of the run's replicas,
// named and seeded, as the scenario shapes them from c.Sim.
//
// A slower GPU is slower in both phases (prefill is compute-bound, decode
// memory-bound, and an older or smaller GPU loses on both), so the slowed
// replica doubles PrefillPerToken as well as DecodePerToken; TTFTBase, the
// fixed per-request overhead, stays.
func replicaConfigs(c *sweepConfig) []sim.Config {
	out := make([]sim.Config, c.Replicas)
	for i := range out {
		sc := c.Sim
		sc.Name = fmt.Sprintf("replica-%d", i)
		sc.Seed = c.Trace.Seed*1000 + uint64(i)
		if c.Scenario == scenarioHeterogeneous {
			switch i {
			case 0:
				sc.PrefillPerToken *= 2
				sc.DecodePerToken *= 2
			case 1:
				sc.KVCacheBlocks /= 2
			}
		}
		out[i] = sc
	}
	return out
}

// sloAttainment is the share of total requests whose TTFT is at most
// target. ttfts holds the TTFTs of the requests that answered; the others
// (errors, cut streams) count as misses, so total is every request sent.
func sloAttainment(ttfts []time.Duration, total int, target time.Duration) float64 {
	if total <= 0 {
		return 0
	}
	met := 0
	for _, d := range ttfts {
		if d <= target {
			met++
		}
	}
	return float64(met) / float64(total)
}

// scenarioLines describes in markdown how the scenario's replicas differ
// from the configuration the report's replica line gives (none for
// homogeneous).
func scenarioLines(c *sweepConfig) string {
	if c.Scenario != scenarioHeterogeneous {
		return ""
	}
	rc := replicaConfigs(c)
	return fmt.Sprintf("- Scenario heterogeneous: replica 0 is a GPU twice as slow per token (prefill %s and decode %s per token; a cold system prompt ≈ %s), "+
		"replica 1 has half the prefix cache (%d blocks, %d tokens); the other replicas are as above.\n",
		rc[0].PrefillPerToken, rc[0].DecodePerToken, rc[0].PrefillDelay(c.Trace.SystemTokens, 0).Round(time.Millisecond),
		rc[1].KVCacheBlocks, rc[1].KVCacheBlocks*rc[1].BlockChars/4)
}
