package drills

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/triage-gw/triage/bench/dolly"
	"github.com/triage-gw/triage/bench/stats"
	"github.com/triage-gw/triage/bench/trace"
	"github.com/triage-gw/triage/cmd/triage-bench/internal/sweep"
	"github.com/triage-gw/triage/server"
)

// traceResult is (c) for one policy in one mode.
type traceResult struct {
	Mode     fleetMode     `json:"mode"`
	Policy   string        `json:"policy"`
	Run      int           `json:"run"`
	Requests int           `json:"requests"`
	OK       int           `json:"ok"`
	Errors   int           `json:"errors"`
	Held     int           `json:"held"`
	SlowPath int           `json:"slow_path"` // answered by the slow pool (the same replicas)
	TTFT     stats.Summary `json:"ttft"`
	// HitRate is prefix-cache hit tokens / looked-up prompt tokens at the replicas.
	HitRate     float64        `json:"prefix_hit_rate"`
	PerReplica  map[string]int `json:"per_replica_requests"`
	LoadMaxMean float64        `json:"load_max_over_mean"`
	Rerouted    int64          `json:"rerouted"`
	ErrorSample string         `json:"error_sample,omitempty"`
	Wall        float64        `json:"wall_s"`
}

// traceMeasures runs (c): the policies sweep's trace through each mode, for each policy.
func (e *fleetEnv) traceMeasures(ctx context.Context, rows []dolly.Row, rep *FleetReport) error {
	tr, err := trace.Generate(e.c.Trace, rows)
	if errors.Is(err, trace.ErrNoRequests) {
		return fmt.Errorf("%w; raise --trace-rate or --trace-duration", err)
	}
	if err != nil {
		return err
	}
	reqs, err := sweep.Prepare(tr, e.c.Sim.Model, e.c.MaxTokens)
	if err != nil {
		return err
	}
	rep.Trace = tr.Stats(e.c.Sim.BlockChars)
	rep.Replica = sweep.NewReplicaJSON(e.c.Sim)
	local, fleet, noAffinity := e.c.modes()
	for _, p := range e.c.Policies {
		for run, m := range slices.Repeat([]fleetMode{local, fleet, noAffinity}, e.c.AffinityRuns) {
			res, err := e.traceRun(ctx, m, p, reqs)
			if err != nil {
				return fmt.Errorf("(c) %s, %s: %w", p, m.Name, err)
			}
			res.Run = run/3 + 1
			fmt.Fprintf(e.stderr, "    (c) %s: prefix hit %.1f%%, TTFT mean %.0f ms p99 %.0f ms, load max/mean %.2f, %d errors, %d slow\n",
				p, 100*res.HitRate, res.TTFT.Mean, res.TTFT.P99, res.LoadMaxMean, res.Errors, res.SlowPath)
			rep.Affinity = append(rep.Affinity, res)
		}
	}
	return nil
}

// traceRun replays reqs through fresh replicas and gateways of mode m running policy p.
func (e *fleetEnv) traceRun(ctx context.Context, m fleetMode, p string, reqs []sweep.PreparedRequest) (traceResult, error) {
	res := traceResult{Mode: m, Policy: p, Requests: len(reqs)}
	reps, err := startReplicas(ctx, e.c.Mockllm, e.c.logDir, fmt.Sprintf("trace%02d-replica", e.runs+1), e.c.Sim, e.c.TraceReplicas)
	defer killReplicas(reps)
	if err != nil {
		return res, err
	}
	// Both pools are the same replicas with the same policy, and the threshold is 0.9999 at
	// any load, so (nearly) every turn goes to the fast pool and one policy's state decides.
	set, err := e.start(ctx, gatewayYAML{mode: m, base: 0.9999, alpha: 0, maxSlow: e.c.MaxSlow, policy: p, fast: reps, slow: reps})
	if err != nil {
		return res, err
	}
	defer set.stop()
	if err := e.warmTrace(ctx, set, reqs); err != nil {
		return res, err
	}
	names := []string{"vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"}
	before, err := replicaCounters(ctx, e.client, reps, names...)
	if err != nil {
		return res, err
	}
	b := newBalancer(set)
	start := time.Now()
	out := sweep.Replay(ctx, reqs, e.c.Drain, func(ctx context.Context, r *sweep.PreparedRequest, held bool) sweep.RequestResult {
		h := http.Header{http.CanonicalHeaderKey(server.HeaderSession): {fmt.Sprintf("s%d", r.Trace.Session)}, "Accept": {"text/event-stream"}}
		a := b.send(ctx, e.client, "/v1/chat/completions", r.Body, h, true)
		rr := sweep.RequestResult{OK: a.ok(), Held: held, Timing: a.timing, Err: a.err}
		if a.header != nil {
			rr.Replica = a.header.Get(server.HeaderReplica) + "|" + a.header.Get(server.HeaderPath)
		}
		return rr
	})
	res.Wall = time.Since(start).Seconds()
	after, err := replicaCounters(ctx, e.client, reps, names...)
	if err != nil {
		return res, err
	}
	if q := after[names[0]] - before[names[0]]; q > 0 {
		res.HitRate = (after[names[1]] - before[names[1]]) / q
	}
	res.Rerouted = b.rerouted.Load()
	res.tally(out)
	return res, set.stop()
}

// tally fills in the client-side counts from the replayed requests.
func (res *traceResult) tally(out []sweep.RequestResult) {
	var ttft []time.Duration
	res.PerReplica = map[string]int{}
	for _, r := range out {
		if r.Held {
			res.Held++
		}
		if !r.OK {
			res.Errors++
			if res.ErrorSample == "" {
				res.ErrorSample = r.Err
			}
			continue
		}
		res.OK++
		ttft = append(ttft, r.Timing.TTFT)
		id, path, _ := strings.Cut(r.Replica, "|")
		res.PerReplica[id]++
		if path == "slow" {
			res.SlowPath++
		}
	}
	res.TTFT = stats.Summarize(ttft)
	load := make([]float64, 0, len(res.PerReplica))
	for _, n := range res.PerReplica {
		load = append(load, float64(n))
	}
	res.LoadMaxMean = stats.MaxOverMean(load)
}

// warmTrace classifies every turn's last user message on every gateway, so the replay's
// classifications are cache hits in every mode and TTFT compares routing, not inference.
func (e *fleetEnv) warmTrace(ctx context.Context, set *fleetGateways, reqs []sweep.PreparedRequest) error {
	var texts []string
	for _, r := range reqs {
		msgs := r.Trace.Messages
		if last := msgs[len(msgs)-1]; last.Role == "user" && !slices.Contains(texts, last.Content) {
			texts = append(texts, last.Content)
		}
	}
	return e.classifyAll(ctx, set, texts)
}
