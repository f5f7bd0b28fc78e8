package sweep

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/triage-gw/triage/bench/trace"
	"github.com/triage-gw/triage/sim"
)

// scale is d times f.
func scale(d time.Duration, f float64) time.Duration { return time.Duration(float64(d) * f) }

// Sweep scenarios: how the replicas of one run differ from each other.
const (
	// scenarioHomogeneous gives every replica the same configuration.
	scenarioHomogeneous = "homogeneous"
	// scenarioHeterogeneous makes replica 0 a slower GPU (both per-token
	// costs doubled) and gives replica 1 half the prefix cache; the others
	// stay as configured. It needs at least 2 replicas.
	scenarioHeterogeneous = "heterogeneous"
	// scenarioDegrading slows replica 0 down (every delay times
	// --degrade-factor) for a stretch in the middle of the replay and
	// restores it after: a throttled or degraded GPU. It needs at least 2
	// replicas.
	scenarioDegrading = "degrading"
	// scenarioTenants keeps the replicas alike and changes the trace: one
	// heavy user issues --heavy-user-share of the requests, all heavy
	// sessions, among light users; the report splits TTFT by tenant.
	scenarioTenants = "tenants"
)

// scenarios are the values --scenario accepts.
var scenarios = []string{scenarioHomogeneous, scenarioHeterogeneous, scenarioDegrading, scenarioTenants, scenarioDisaggregated}

// degradeSchedule is the degrading scenario's slow stretch: replica 0
// runs Factor times slower from From to Until, counted from the start of
// the replay (the first planned arrival is at 0).
type degradeSchedule struct {
	From, Until time.Duration
	Factor      float64
}

// degradeSchedule places the slow stretch in the arrival window
// (--duration): it starts at --degrade-from of it and lasts --degrade-for
// of it, so it scales with the run.
func (c *sweepConfig) degradeSchedule() degradeSchedule {
	d := float64(c.Trace.Duration)
	from := time.Duration(c.DegradeFrom * d).Round(time.Millisecond)
	return degradeSchedule{From: from, Until: from + time.Duration(c.DegradeFor*d).Round(time.Millisecond), Factor: c.DegradeFactor}
}

// slowable is a replica whose speed can change at runtime (*sim.Server).
type slowable interface {
	SetSlowdown(factor float64) error
}

// run slows srv by d.Factor at d.From and restores it at d.Until, counted
// from the call, waiting with sleep (a sim.Clock's Sleep). It returns nil
// when ctx ends first: a replay cut short leaves nothing to restore, the
// replicas are discarded with it.
func (d degradeSchedule) run(ctx context.Context, srv slowable, sleep func(context.Context, time.Duration) error) error {
	if sleep(ctx, d.From) != nil {
		return nil
	}
	if err := srv.SetSlowdown(d.Factor); err != nil {
		return err
	}
	if sleep(ctx, d.Until-d.From) != nil {
		return nil
	}
	return srv.SetSlowdown(1)
}

// validateScenario reports what the chosen scenario needs and lacks, and
// the scenario flags' ranges, naming the flags. The tenants scenario's
// need for --users >= 2 is the trace's own check.
func (c *sweepConfig) validateScenario() []error {
	var errs []error
	switch {
	case !slices.Contains(scenarios, c.Scenario):
		errs = append(errs, fmt.Errorf("policies: --scenario must be one of %s, got %q", strings.Join(scenarios, ", "), c.Scenario))
	case (c.Scenario == scenarioHeterogeneous || c.Scenario == scenarioDegrading) && c.Replicas < 2:
		errs = append(errs, fmt.Errorf("policies: --scenario %s needs --replicas >= 2, got %d", c.Scenario, c.Replicas))
	case c.Scenario == scenarioDegrading && c.Trace.Duration <= 0:
		errs = append(errs, fmt.Errorf("policies: --scenario degrading needs --duration > 0 (the slow stretch is a share of it), got %s", c.Trace.Duration))
	}
	if !(c.DegradeFrom >= 0 && c.DegradeFrom < 1) {
		errs = append(errs, fmt.Errorf("policies: --degrade-from must be in [0, 1), got %v", c.DegradeFrom))
	} else if !(c.DegradeFor > 0 && c.DegradeFor <= 1-c.DegradeFrom) {
		errs = append(errs, fmt.Errorf("policies: --degrade-for must be in (0, 1 - --degrade-from] = (0, %v], got %v", 1-c.DegradeFrom, c.DegradeFor))
	}
	if !(c.DegradeFactor >= 1) || math.IsInf(c.DegradeFactor, 1) {
		errs = append(errs, fmt.Errorf("policies: --degrade-factor must be a finite number >= 1, got %v", c.DegradeFactor))
	}
	if !(c.HeavyUserShare > 0 && c.HeavyUserShare < 1) {
		errs = append(errs, fmt.Errorf("policies: --heavy-user-share must be in (0, 1), got %v", c.HeavyUserShare))
	}
	return errs
}

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
	switch c.Scenario {
	case scenarioDegrading:
		d, s := c.degradeSchedule(), c.Sim
		return fmt.Sprintf("- Scenario degrading: replica 0 runs %g× slower (every prefill and token delay × %g: prefill %s and decode %s per token) "+
			"from %.2f s to %.2f s after the replay's start (%.0f%%–%.0f%% of the %s arrival window), at full speed before and after; "+
			"requests running at a switch change speed at their next delay. The other replicas are as above throughout.\n",
			d.Factor, d.Factor, scale(s.PrefillPerToken, d.Factor), scale(s.DecodePerToken, d.Factor),
			d.From.Seconds(), d.Until.Seconds(), 100*c.DegradeFrom, 100*(c.DegradeFrom+c.DegradeFor), c.Trace.Duration)
	case scenarioTenants:
		return fmt.Sprintf("- Scenario tenants: one heavy user (%s) holds %.0f%% of the open sessions, so issues about that share of the requests, "+
			"all of them heavy sessions; every other session is light and belongs to one of the other %d users. "+
			"The tenant columns split TTFT between the heavy user and the light users (vtc-basic's fairness key is the user).\n",
			trace.HeavyUser, 100*c.HeavyUserShare, c.Trace.Users-1)
	case scenarioDisaggregated:
		return disaggregatedLine(c)
	case scenarioHeterogeneous:
	default:
		return ""
	}
	rc := replicaConfigs(c)
	return fmt.Sprintf("- Scenario heterogeneous: replica 0 is a GPU twice as slow per token (prefill %s and decode %s per token; a cold system prompt ≈ %s), "+
		"replica 1 has half the prefix cache (%d blocks, %d tokens); the other replicas are as above.\n",
		rc[0].PrefillPerToken, rc[0].DecodePerToken, rc[0].PrefillDelay(c.Trace.SystemTokens, 0).Round(time.Millisecond),
		rc[1].KVCacheBlocks, rc[1].KVCacheBlocks*rc[1].BlockChars/4)
}
