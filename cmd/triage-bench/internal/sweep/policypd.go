package sweep

import (
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/triage-gw/triage/bench/stats"
	"github.com/triage-gw/triage/sim"
	"github.com/triage-gw/triage/upstream"
)

// scenarioDisaggregated compares aggregated pools (every replica runs whole
// requests) with disaggregated pools of the same replica count: the first
// --prefill-replicas replicas prefill, the others decode. A sweep policy
// named pd-<policy> is a disaggregated pool whose decode replica <policy>
// picks (its prefill replica: prefix-cache); any other name is an aggregated
// pool with that policy. --prefill-interference stretches a replica's decode
// steps while it prefills, the stall that disaggregation removes.
const scenarioDisaggregated = "disaggregated"

// pdPrefix marks a sweep policy run on a disaggregated pool.
const pdPrefix = "pd-"

// pdSweepPolicies are the disaggregated scenario's policies unless
// --policies names others: aggregated baselines, then disaggregated pools
// with random and load-aware decode picks.
var pdSweepPolicies = []string{"least-request", "prefix-cache", "pd-random", "pd-least-request", "pd-least-kv-cache"}

// decodePolicy returns the decode policy of a pd-<policy> sweep name.
func decodePolicy(name string) (string, bool) { return strings.CutPrefix(name, pdPrefix) }

// prefillReplicas is how many replicas prefill in a disaggregated run:
// --prefill-replicas, or half the replicas when it is 0.
func (c *sweepConfig) prefillReplicas() int {
	if c.PrefillReplicas > 0 {
		return c.PrefillReplicas
	}
	return c.Replicas / 2
}

// sweepRoles are the replicas' roles for a run of policy: nil for an
// aggregated pool, else prefill for the first prefillReplicas and decode for
// the others.
func (c *sweepConfig) sweepRoles(policy string) []string {
	if _, ok := decodePolicy(policy); !ok {
		return nil
	}
	roles := make([]string, c.Replicas)
	for i := range roles {
		roles[i] = upstream.RoleDecode
		if i < c.prefillReplicas() {
			roles[i] = upstream.RolePrefill
		}
	}
	return roles
}

// disaggregate makes pcfg a disaggregated pool for policy's roles: its
// decode picks by the policy's name (lmetric variants keep lmetric's),
// prefill picks by prefix-cache, a short leg deadline (replicas here answer
// in milliseconds).
func disaggregate(pcfg *upstream.PoolConfig, roles []string) {
	if roles == nil {
		return
	}
	for i := range pcfg.Replicas {
		pcfg.Replicas[i].Role = roles[i]
	}
	d := &pcfg.Disaggregation
	d.DecodePolicy = pcfg.Policy.Name
	d.LegDeadline = upstream.Duration(5 * time.Second)
}

// validateDisaggregated reports what the disaggregated scenario needs and
// lacks, and pd- policies outside it.
func (c *sweepConfig) validateDisaggregated() []error {
	var errs []error
	pd := false
	for _, p := range c.Policies {
		_, ok := decodePolicy(p)
		pd = pd || ok
	}
	switch {
	case c.Scenario != scenarioDisaggregated && pd:
		errs = append(errs, fmt.Errorf("policies: the %s* policies need --scenario %s", pdPrefix, scenarioDisaggregated))
	case c.Scenario != scenarioDisaggregated:
	case c.Replicas < 2:
		errs = append(errs, fmt.Errorf("policies: --scenario %s needs --replicas >= 2, got %d", c.Scenario, c.Replicas))
	case c.PrefillReplicas < 0 || c.PrefillReplicas >= c.Replicas:
		errs = append(errs, fmt.Errorf("policies: --prefill-replicas must be in [0, --replicas (%d)) (0: half), got %d", c.Replicas, c.PrefillReplicas))
	}
	return errs
}

// DecodeResult is what the decode side of a run delivered: the time between
// output tokens, and output tokens per second over the run.
type DecodeResult struct {
	// ITL summarises each answered request's mean gap between its tokens
	// ((E2E − TTFT) / (events − 1)), in ms.
	ITL stats.Summary `json:"itl"`
	// TokensPerSec is the output events of answered requests over the
	// replay's wall time.
	TokensPerSec float64 `json:"output_tokens_per_s"`
}

// tallyDecode summarises out's decode side over wall seconds.
func tallyDecode(out []RequestResult, wall float64) *DecodeResult {
	var itl []time.Duration
	tokens := 0
	for _, r := range out {
		if !r.OK {
			continue
		}
		tokens += r.Timing.Events
		if n := r.Timing.Events; n > 1 {
			itl = append(itl, (r.Timing.E2E-r.Timing.TTFT)/time.Duration(n-1))
		}
	}
	d := &DecodeResult{ITL: stats.Summarize(itl)}
	if wall > 0 {
		d.TokensPerSec = float64(tokens) / wall
	}
	return d
}

// decodeColumns are the disaggregated scenario's extra columns.
func decodeColumns() (head, sep string) {
	return " pool | ITL mean ms | ITL p99 ms | output tokens/s |", "---|---|---|---|"
}

// decodeCells are x's cells under decodeColumns.
func decodeCells(c *sweepConfig, x *PolicyResult) string {
	pool := fmt.Sprintf("aggregated, %d whole", c.Replicas)
	if _, ok := decodePolicy(x.Policy); ok {
		pool = fmt.Sprintf("%d prefill + %d decode", c.prefillReplicas(), c.Replicas-c.prefillReplicas())
	}
	d := x.Decode
	if d == nil {
		return " " + pool + " | — | — | — |"
	}
	return fmt.Sprintf(" %s | %.1f | %.1f | %.0f |", pool, d.ITL.Mean, d.ITL.P99, d.TokensPerSec)
}

// disaggregatedLine describes the scenario for the report.
func disaggregatedLine(c *sweepConfig) string {
	return fmt.Sprintf("- Scenario disaggregated: the same %d replicas run aggregated (every replica whole) or disaggregated (pd-<policy>: %d prefill replicas picked by prefix-cache, "+
		"%d decode replicas picked by <policy>, vLLM's NIXL hand-off as the simulator plays it: the decode skips the prefill). "+
		"Each prefill running on a replica stretches its decode steps by %g× decode_per_token (prefill_interference). "+
		"ITL is each request's mean gap between tokens; requests per replica counts the replica that answered (the decode replica).\n",
		c.Replicas, c.prefillReplicas(), c.Replicas-c.prefillReplicas(), c.Sim.PrefillInterference)
}

// simRole is the simulator's role for a gateway role.
func simRole(role string) string {
	switch role {
	case upstream.RolePrefill:
		return sim.RolePrefill
	case upstream.RoleDecode:
		return sim.RoleDecode
	}
	return ""
}

// flagSet reports whether the flag called name was given on the command line.
func flagSet(fs *flag.FlagSet, name string) (set bool) {
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
