package sweep

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/triage-gw/triage/bench/dolly"
	"github.com/triage-gw/triage/bench/report"
	"github.com/triage-gw/triage/bench/sse"
	"github.com/triage-gw/triage/bench/stats"
	"github.com/triage-gw/triage/bench/trace"
	"github.com/triage-gw/triage/sim"
	"github.com/triage-gw/triage/upstream"
	"github.com/triage-gw/triage/upstream/kvevents"
	"github.com/triage-gw/triage/upstream/policy"
)

// sweepPolicies are the policies the sweep compares, in report order.
// "lmetric-sticky" and "lmetric-unified" are the lmetric policy with its
// variant set.
var sweepPolicies = []string{
	"round-robin", "random", "least-request", "prefix-cache", "prefix-cache-preble",
	"lmetric", "lmetric-sticky", "lmetric-unified", "weighted", "vtc-basic",
	"least-kv-cache", "least-utilization", "least-busy-time", "throughput", "least-latency",
	"slo-least-load", "slo-pack-load",
}

// cacheAware are the policies that look at prompt prefixes.
var cacheAware = []string{"prefix-cache", "prefix-cache-preble", "lmetric", "lmetric-sticky", "lmetric-unified", "weighted"}

// sweepConfig is everything the policies subcommand needs.
type sweepConfig struct {
	Scenario       string        `json:"scenario"`
	Replicas       int           `json:"replicas"`
	Policies       []string      `json:"policies"`
	Sim            sim.Config    `json:"-"`
	MaxTokens      int           `json:"max_tokens"`
	ScrapeInterval time.Duration `json:"scrape_interval_ns"`
	Drain          time.Duration `json:"drain_ns"`
	Trace          trace.Config  `json:"trace"`
	SLOTTFT        time.Duration `json:"slo_ttft_ns"`
	// DegradeFrom and DegradeFor place the degrading scenario's slow
	// stretch, as shares of the arrival window; DegradeFactor is how much
	// slower replica 0 is in it.
	DegradeFrom   float64 `json:"degrade_from"`
	DegradeFor    float64 `json:"degrade_for"`
	DegradeFactor float64 `json:"degrade_factor"`
	// HeavyUserShare is the tenants scenario's heavy user's share of the
	// sessions (the trace's HeavyUserShare in that scenario only).
	HeavyUserShare float64 `json:"heavy_user_share"`
	// PrefillReplicas is how many replicas prefill in the disaggregated
	// scenario's pd- runs (0: half).
	PrefillReplicas int `json:"prefill_replicas"`
	// Seeds, when set, are the trace seeds the sweep runs once each
	// (--seeds); empty: one run with the trace's seed.
	Seeds []uint64 `json:"seeds,omitempty"`
	// KVEvents has every replica publish its KV-cache events and the pool
	// route on them (--kv-events) instead of on the prefix policies' guess.
	KVEvents bool `json:"kv_events,omitempty"`

	dolly      string
	out        string
	plot       bool
	python     string
	plotScript string
}

// DefaultSim is a replica on which prefill dominates: a cold 1,500-token
// system prompt costs about 245 ms, a warm turn a few ms; 4 slots per
// replica so queueing shows when a policy piles requests on one replica;
// a KV cache of 1,500 64-byte blocks (24k tokens), too small to hold every
// open session's history on every replica (the trace's working set is
// several times that).
func DefaultSim() sim.Config {
	c := sim.FastPreset()
	c.Name = "replica"
	c.Model = "mock-sweep"
	c.MaxRunning = 4
	c.MaxWaiting = 1024
	c.TTFTBase = 20 * time.Millisecond
	c.PrefillPerToken = 150 * time.Microsecond
	c.DecodePerToken = 10 * time.Millisecond
	c.Jitter = 0.1
	c.BlockChars = 64
	c.KVCacheBlocks = 1500
	c.DefaultMaxTokens = 16
	return c
}

// bindFlags defines the sweep's own flags on fs, into c and, for the
// comma-separated policy list, into policies, whose value is the default.
func (c *sweepConfig) bindFlags(fs *flag.FlagSet, policies *string) {
	fs.StringVar(&c.Scenario, "scenario", scenarioHomogeneous, "what differs from the plain sweep: homogeneous (replicas alike), heterogeneous (replica 0 twice as slow per prompt and output token, replica 1 with half the --kv-blocks; needs --replicas >= 2), "+
		"degrading (replica 0 --degrade-factor times slower for a stretch of the run; needs --replicas >= 2), tenants (one user issues --heavy-user-share of the requests, all heavy; needs --users >= 2) "+
		"or disaggregated (aggregated pools against prefill/decode pools of the same --replicas: a policy pd-<name> runs --prefill-replicas prefill and the rest decode replicas picked by <name>; default policies "+strings.Join(pdSweepPolicies, ",")+")")
	fs.Float64Var(&c.DegradeFrom, "degrade-from", 0.25, "degrading scenario: when replica 0 slows down, as a share of --duration from the first arrival")
	fs.Float64Var(&c.DegradeFor, "degrade-for", 0.5, "degrading scenario: how long replica 0 stays slow, as a share of --duration (default: the middle half of the run)")
	fs.Float64Var(&c.DegradeFactor, "degrade-factor", 2, "degrading scenario: how many times slower replica 0 is meanwhile (every prefill and token delay multiplied)")
	fs.Float64Var(&c.HeavyUserShare, "heavy-user-share", 0.5, "tenants scenario: share of the open sessions, and so of the requests, that the one heavy user holds; all its sessions are heavy, the other users' light")
	fs.DurationVar(&c.SLOTTFT, "slo-ttft", defaultSLOTTFT, "TTFT target for SLO attainment (share of requests sent whose first token came within it); the default is just above one cold 1,500-token system prompt on a default replica (≈ 245 ms), so only queueing or a slowed replica misses it")
	fs.IntVar(&c.Replicas, "replicas", 4, "simulated replicas (sim servers on 127.0.0.1:0, fresh for every policy)")
	fs.IntVar(&c.PrefillReplicas, "prefill-replicas", 0, "disaggregated scenario: how many of --replicas prefill in the pd-<policy> runs, the rest decode (0: half)")
	fs.StringVar(policies, "policies", *policies, "comma-separated policies to compare (lmetric-sticky and lmetric-unified are lmetric variants)")
	fs.StringVar(&c.dolly, "dolly", dolly.DefaultPath, "Dolly JSONL file the prompts come from")
	fs.BoolVar(&c.KVEvents, "kv-events", false, "replicas publish KV-cache events (vLLM's format) and the pool routes the prefix-aware policies on them, keyed by /tokenize, instead of on their guess of what was sent where")
	fs.DurationVar(&c.ScrapeInterval, "scrape-interval", time.Second, "how often the pool scrapes each replica's /metrics (queue depth, KV use)")
	fs.DurationVar(&c.Drain, "drain", 20*time.Second, "after the last arrival, how long to wait for answers before cutting them (counted as errors)")
	fs.StringVar(&c.out, "out", "", "directory for results.json, results.csv and table.md (empty: stdout only)")
	fs.BoolVar(&c.plot, "plot", false, "run --plot-script on results.csv to draw policies.png into --out")
	fs.StringVar(&c.python, "python", ".deps/venv/bin/python", "Python interpreter with matplotlib, for --plot")
	fs.StringVar(&c.plotScript, "plot-script", "bench/plot_policies.py", "plotting script, for --plot")
}

// BindTraceFlags defines the trace's flags on fs, into t, whose values are
// the defaults.
func BindTraceFlags(fs *flag.FlagSet, t *trace.Config) {
	fs.Uint64Var(&t.Seed, "seed", t.Seed, "seed of the trace (and of the random policy)")
	fs.Float64Var(&t.Rate, "rate", t.Rate, "Poisson arrival rate, requests per second")
	fs.DurationVar(&t.Duration, "duration", t.Duration, "arrival window per policy")
	fs.IntVar(&t.Requests, "requests", t.Requests, "cap on requests per policy (0: only --duration bounds it)")
	fs.IntVar(&t.SystemPrompts, "system-prompts", t.SystemPrompts, "distinct shared system prompts")
	fs.IntVar(&t.SystemTokens, "system-tokens", t.SystemTokens, "size of each system prompt in tokens (4 bytes each)")
	fs.IntVar(&t.ActiveSessions, "active-sessions", t.ActiveSessions, "sessions open at once")
	fs.Float64Var(&t.HeavyFraction, "heavy-fraction", t.HeavyFraction, "share of sessions that are heavy (more turns, long documents)")
	fs.IntVar(&t.LightTurnsMin, "light-turns-min", t.LightTurnsMin, "fewest turns of a light session")
	fs.IntVar(&t.LightTurnsMax, "light-turns-max", t.LightTurnsMax, "most turns of a light session")
	fs.IntVar(&t.HeavyTurnsMin, "heavy-turns-min", t.HeavyTurnsMin, "fewest turns of a heavy session")
	fs.IntVar(&t.HeavyTurnsMax, "heavy-turns-max", t.HeavyTurnsMax, "most turns of a heavy session")
	fs.IntVar(&t.LightContext, "light-context-bytes", t.LightContext, "cap on the Dolly context attached to a light turn")
	fs.IntVar(&t.HeavyContext, "heavy-context-bytes", t.HeavyContext, "cap on the Dolly context attached to a heavy turn")
	fs.IntVar(&t.AnswerBytes, "answer-bytes", t.AnswerBytes, "cap on each assistant message kept in the history")
	fs.DurationVar(&t.MinThink, "min-think", t.MinThink, "least planned gap between two turns of a session")
	fs.IntVar(&t.Users, "users", t.Users, "distinct users (vtc-basic's fairness key)")
}

// bindReplicaFlags defines the simulated replicas' flags on fs, into c.Sim
// (whose values are the defaults) and c.MaxTokens.
func (c *sweepConfig) bindReplicaFlags(fs *flag.FlagSet) {
	s := &c.Sim
	fs.IntVar(&s.MaxRunning, "max-running", s.MaxRunning, "batch slots per replica")
	fs.IntVar(&s.MaxWaiting, "max-waiting", s.MaxWaiting, "queue bound per replica (beyond it 429)")
	fs.DurationVar(&s.TTFTBase, "ttft-base", s.TTFTBase, "fixed part of each replica's time to first token")
	fs.DurationVar(&s.PrefillPerToken, "prefill-per-token", s.PrefillPerToken, "prefill time per prompt token not in the replica's prefix cache")
	fs.DurationVar(&s.DecodePerToken, "decode-per-token", s.DecodePerToken, "time between output tokens")
	fs.Float64Var(&s.Jitter, "jitter", s.Jitter, "per-request latency factor half-width")
	fs.Float64Var(&s.PrefillInterference, "prefill-interference", s.PrefillInterference, "decode slowdown per prefill running on the same replica: a decode step takes decode-per-token × (1 + this × prefills running)")
	fs.IntVar(&s.BlockChars, "block-chars", s.BlockChars, "replica prefix-cache block size in bytes")
	fs.IntVar(&s.KVCacheBlocks, "kv-blocks", s.KVCacheBlocks, "replica prefix-cache capacity in blocks")
	fs.IntVar(&c.MaxTokens, "max-tokens", 16, "max_tokens of every request (output length)")
}

func parsePoliciesFlags(args []string, stderr io.Writer) (*sweepConfig, error) {
	fs := flag.NewFlagSet("triage-bench policies", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := &sweepConfig{Sim: DefaultSim(), Trace: trace.DefaultConfig()}
	policies := strings.Join(sweepPolicies, ",")
	c.bindFlags(fs, &policies)
	BindTraceFlags(fs, &c.Trace)
	c.bindReplicaFlags(fs)
	var seeds string
	fs.StringVar(&seeds, "seeds", "", "comma-separated trace seeds: run the whole sweep once per seed (overrides --seed) and add each policy's mean and min–max across them to the report, to tell real differences from seed-to-seed noise")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `Usage: triage-bench policies [flags]

Replays one seeded multi-turn chat trace built from Dolly prompts (shared
system prompts, growing histories, some heavy sessions, Poisson arrivals)
against fresh simulated replicas once per replica policy, through
upstream.Pool with streaming chat requests, and reports TTFT and end-to-end
latency, SLO attainment (share of requests with TTFT within --slo-ttft),
prefix-cache hit rate, per-replica load (max/mean) and Jain's fairness
index. Everything runs in this process on 127.0.0.1. --scenario
heterogeneous replays the same trace on replicas that differ: replica 0
twice as slow per token, replica 1 with half the prefix cache. --scenario
degrading slows replica 0 down for the middle half of the run
(--degrade-from, --degrade-for, --degrade-factor). --scenario tenants
makes one user heavy (--heavy-user-share of the requests) among light ones
and reports TTFT per tenant, what fairness policies (vtc-basic) are for.
--scenario disaggregated compares aggregated pools with prefill/decode pools
of the same replica count (pd-<policy>: --prefill-replicas prefill replicas,
decode picks by <policy>) and adds inter-token latency and output tokens/s;
--prefill-interference makes a replica's prefills slow its decoding.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("policies: unexpected arguments %q", fs.Args())
	}
	if c.Scenario == scenarioDisaggregated && !flagSet(fs, "policies") {
		policies = strings.Join(pdSweepPolicies, ",")
	}
	for _, p := range strings.Split(policies, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		if _, err := PolicyConfig(p, 0, 0); err != nil {
			return nil, err
		}
		c.Policies = append(c.Policies, p)
	}
	for _, f := range strings.Split(seeds, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		seed, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("policies: --seeds: %q is not a seed (a non-negative integer)", f)
		}
		c.Seeds = append(c.Seeds, seed)
	}
	if len(c.Seeds) > 0 {
		c.Trace.Seed = c.Seeds[0]
	}
	if err := c.finish(); err != nil {
		return nil, err
	}
	return c, nil
}

// finish gives the replicas --max-tokens as their output length and
// reports every out-of-range field: the sweep's by flag name, then the
// replicas' and the trace's.
func (c *sweepConfig) finish() error {
	var errs []error
	if len(c.Policies) == 0 {
		errs = append(errs, errors.New("policies: --policies is empty"))
	}
	if c.Replicas < 1 {
		errs = append(errs, fmt.Errorf("policies: --replicas must be >= 1, got %d", c.Replicas))
	}
	errs = append(errs, c.validateScenario()...)
	errs = append(errs, c.validateDisaggregated()...)
	if c.Scenario == scenarioTenants {
		c.Trace.HeavyUserShare = c.HeavyUserShare
	}
	if c.SLOTTFT <= 0 {
		errs = append(errs, fmt.Errorf("policies: --slo-ttft must be > 0, got %s", c.SLOTTFT))
	}
	if c.MaxTokens < 1 {
		errs = append(errs, fmt.Errorf("policies: --max-tokens must be >= 1, got %d", c.MaxTokens))
	}
	if c.Drain <= 0 {
		errs = append(errs, fmt.Errorf("policies: --drain must be > 0, got %s", c.Drain))
	}
	if c.ScrapeInterval < 0 {
		errs = append(errs, fmt.Errorf("policies: --scrape-interval must be >= 0, got %s", c.ScrapeInterval))
	}
	s := &c.Sim
	s.DefaultMaxTokens = c.MaxTokens
	s.MaxOutputTokens = max(s.MaxOutputTokens, c.MaxTokens)
	errs = append(errs, s.Validate(), c.Trace.Validate())
	return errors.Join(errs...)
}

// LmetricVariants are the sweep names that stand for lmetric with a variant.
var LmetricVariants = map[string]string{"lmetric-sticky": policy.LMetricSticky, "lmetric-unified": policy.LMetricUnified}

// PolicyConfig maps a sweep policy name to the pool's policy config. The
// policies keep their defaults: the sweep compares them, it does not tune
// them. Only the random policy's seed is fixed, for reproducibility, and
// the SLO policies' per-pool TTFT target is sloTTFT (the sweep's
// --slo-ttft; 0 leaves them routing by least-request), since the replayed
// requests carry no x-slo-ttft-ms header and the target is what the
// sweep's SLO attainment is measured against.
func PolicyConfig(name string, seed uint64, sloTTFT time.Duration) (policy.Config, error) {
	sweepName := name
	if decode, ok := decodePolicy(name); ok {
		name = decode // a disaggregated pool: the policy of its decode picks and whole requests
	}
	pc := policy.DefaultConfig()
	pc.Name = name
	random := policy.SectionOf[policy.RandomConfig](pc, "random")
	random.Seed = seed + 1
	err := pc.SetSection("random", random)
	if err == nil {
		slo := policy.SectionOf[policy.SLOConfig](pc, "slo")
		slo.TTFTTarget = sloTTFT
		err = pc.SetSection("slo", slo)
	}
	if variant, ok := LmetricVariants[name]; ok && err == nil {
		lm := policy.SectionOf[policy.LMetricConfig](pc, "lmetric")
		pc.Name, lm.Variant = "lmetric", variant
		err = pc.SetSection("lmetric", lm)
	}
	if err == nil {
		err = pc.ValidateAt("policy")
	}
	if err != nil {
		return pc, fmt.Errorf("policy %q: %w", sweepName, err)
	}
	return pc, nil
}

// PolicyResult is one policy's outcome.
type PolicyResult struct {
	Policy   string        `json:"policy"`
	Requests int           `json:"requests"`
	OK       int           `json:"ok"`
	Errors   int           `json:"errors"`
	Held     int           `json:"held"` // turns sent late because the previous turn was still running
	TTFT     stats.Summary `json:"ttft"`
	E2E      stats.Summary `json:"e2e"`
	// HitRate is prefix-cache hit tokens / looked-up prompt tokens, summed
	// over the replicas (their own counters).
	HitRate float64 `json:"prefix_hit_rate"`
	// SLOAttainment is the share of requests sent whose TTFT was within
	// the sweep's --slo-ttft; errors count as misses.
	SLOAttainment float64 `json:"slo_attainment"`
	PrefillTokens int64   `json:"prefill_tokens"` // prompt tokens not served from cache
	PerReplica    []int   `json:"per_replica_requests"`
	LoadMaxMean   float64 `json:"load_max_over_mean"`
	Jain          float64 `json:"jain_index"`
	Wall          float64 `json:"wall_s"`
	// TimerLate is how late a 10 ms timer fired during the replay: the
	// machine's scheduling noise, which stretches every latency here.
	TimerLate   stats.Summary `json:"timer_late"`
	ErrorSample string        `json:"error_sample,omitempty"`
	// Tenants splits the outcome by tenant (tenants scenario only).
	Tenants *TenantResults `json:"tenants,omitempty"`
	// Degraded is the outcome while replica 0 was slowed (degrading
	// scenario only).
	Degraded *DegradeResult `json:"degraded,omitempty"`
	// Decode is the time between tokens and the output rate.
	Decode *DecodeResult `json:"decode,omitempty"`
}

// RequestResult is one replayed request.
type RequestResult struct {
	OK      bool
	Held    bool   // waited for its conversation's previous turn
	Replica string // the replica id (or what the sender put there)
	Timing  sse.Timing
	Err     string
	// sent is when the request was sent, from the replay's start; wasSent
	// is false for a request cut before it was.
	sent    time.Duration
	wasSent bool
}

// PreparedRequest is a trace request with its body marshalled ahead of
// the replay, so encoding costs nothing during the timed part.
type PreparedRequest struct {
	Trace *trace.Request
	Body  []byte
}

type ChatBody struct {
	Model     string        `json:"model"`
	Messages  []ChatMessage `json:"messages"`
	Stream    bool          `json:"stream"`
	MaxTokens int           `json:"max_tokens"`
}

type ChatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

func Prepare(tr *trace.Trace, model string, maxTokens int) ([]PreparedRequest, error) {
	out := make([]PreparedRequest, len(tr.Requests))
	for i := range tr.Requests {
		r := &tr.Requests[i]
		msgs := make([]ChatMessage, len(r.Messages))
		for j, m := range r.Messages {
			msgs[j] = ChatMessage{Role: m.Role, Content: m.Content}
		}
		b, err := json.Marshal(ChatBody{Model: model, Messages: msgs, Stream: true, MaxTokens: maxTokens})
		if err != nil {
			return nil, fmt.Errorf("marshal request %d: %w", i, err)
		}
		out[i] = PreparedRequest{Trace: r, Body: b}
	}
	return out, nil
}

// Run is the policies subcommand. With --seeds it runs the whole
// sweep once per trace seed; the report's main table is the first seed's,
// and an extra table gives each policy's spread across the seeds.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := parsePoliciesFlags(args, stderr)
	if err != nil {
		return err
	}
	rows, err := dolly.Load(c.dolly)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	seeds := c.Seeds
	if len(seeds) == 0 {
		seeds = []uint64{c.Trace.Seed}
	}
	var rep *PolicyReport
	for i, seed := range seeds {
		sc := *c
		sc.Trace.Seed = seed
		if len(c.Seeds) > 0 {
			fmt.Fprintf(stderr, "seed %d:\n", seed)
		}
		ts, results, err := runSweep(ctx, &sc, rows, logger, stderr)
		if err != nil {
			return err
		}
		if i == 0 {
			c.Trace.Seed = seed
			rep = &PolicyReport{Command: report.CommandLine("policies", args), Config: c, SimConfig: c.Sim, Replica: NewReplicaJSON(c.Sim), PerReplica: perReplicaJSON(c), Trace: ts, Machine: report.DescribeMachine(), Results: results}
		}
		if len(c.Seeds) > 0 {
			rep.SeedRuns = append(rep.SeedRuns, SeedRun{Seed: seed, Results: results})
		}
	}
	return rep.Write(stdout, stderr)
}

// runSweep generates c's trace from rows and replays it once per policy.
func runSweep(ctx context.Context, c *sweepConfig, rows []dolly.Row, logger *slog.Logger, stderr io.Writer) (trace.Stats, []PolicyResult, error) {
	tr, err := trace.Generate(c.Trace, rows)
	if errors.Is(err, trace.ErrNoRequests) {
		return trace.Stats{}, nil, fmt.Errorf("%w; raise --rate or --duration", err)
	}
	if err != nil {
		return trace.Stats{}, nil, err
	}
	reqs, err := Prepare(tr, c.Sim.Model, c.MaxTokens)
	if err != nil {
		return trace.Stats{}, nil, err
	}
	ts := tr.Stats(c.Sim.BlockChars)
	fmt.Fprintf(stderr, "trace: %d requests, %d sessions (%d heavy), input tokens mean %.0f p50 %.0f max %.0f, %d distinct %d-byte blocks\n",
		ts.Requests, ts.Sessions, ts.HeavySessions, ts.InputTokens.Mean, ts.InputTokens.P50, ts.InputTokens.Max, ts.DistinctBlocks, ts.BlockChars)
	var results []PolicyResult
	for _, p := range c.Policies {
		if err := ctx.Err(); err != nil {
			return ts, nil, err
		}
		fmt.Fprintf(stderr, "policy %-16s ... ", p)
		res, err := runOnePolicy(ctx, c, p, reqs, logger)
		if err != nil {
			fmt.Fprintln(stderr, "failed")
			return ts, nil, fmt.Errorf("policy %s: %w", p, err)
		}
		fmt.Fprintf(stderr, "ttft mean %.0f ms p99 %.0f ms, slo %.1f%%, hit %.1f%%, load max/mean %.2f, %d errors, %d held (%.1fs, timer late p99 %.1f ms)\n",
			res.TTFT.Mean, res.TTFT.P99, 100*res.SLOAttainment, 100*res.HitRate, res.LoadMaxMean, res.Errors, res.Held, res.Wall, res.TimerLate.P99)
		results = append(results, res)
	}
	return ts, results, nil
}

// runOnePolicy starts fresh replicas and a fresh pool, replays reqs and
// collects the result. Everything it starts has stopped when it returns.
func runOnePolicy(ctx context.Context, c *sweepConfig, policy string, reqs []PreparedRequest, logger *slog.Logger) (PolicyResult, error) {
	res := PolicyResult{Policy: policy, Requests: len(reqs)}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g, gctx := errgroup.WithContext(ctx)
	defer func() { cancel(); g.Wait() }()

	pcfg := upstream.DefaultPoolConfig()
	pcfg.Name = "sweep"
	pcfg.HealthCheck.Interval = 0 // replicas do not fail here; scraping still runs
	pcfg.ScrapeInterval = upstream.Duration(c.ScrapeInterval)
	roles := c.sweepRoles(policy)
	servers, index, err := startSweepReplicas(gctx, g, c, &pcfg, roles)
	if err != nil {
		return res, err
	}
	pc, err := PolicyConfig(policy, c.Trace.Seed, c.SLOTTFT)
	if err != nil {
		return res, err
	}
	pcfg.Policy = pc
	disaggregate(&pcfg, roles)
	reg := prometheus.NewRegistry()
	pool, err := upstream.New(pcfg, upstream.Options{Logger: logger, Registerer: reg})
	if err != nil {
		return res, err
	}
	g.Go(func() error { return pool.Run(gctx) })
	if c.ScrapeInterval > 0 {
		waitScraped(gctx, pool, 3*time.Second)
	}
	if c.KVEvents {
		if err := waitEvents(gctx, reg, servers, 10*time.Second); err != nil {
			return res, err
		}
	}

	if c.Scenario == scenarioDegrading {
		// Started just before the replay, so its From and Until count from
		// (within microseconds of) the replay's start, as the trace's
		// arrival times do.
		d := c.degradeSchedule()
		g.Go(func() error { return d.run(gctx, servers[0], sim.WallClock.Sleep) })
	}
	stopProbe := report.StartTimerProbe(gctx)
	start := time.Now()
	out := Replay(gctx, reqs, c.Drain, func(ctx context.Context, r *PreparedRequest, held bool) RequestResult {
		return sendChat(ctx, pool, r, held)
	})
	res.Wall = time.Since(start).Seconds()
	res.TimerLate = stopProbe()

	res.tally(out, servers, index, c.SLOTTFT)
	res.Decode = tallyDecode(out, res.Wall)
	if c.Scenario == scenarioTenants {
		res.Tenants = tallyTenants(out, reqs, c.SLOTTFT)
	}
	if c.Scenario == scenarioDegrading {
		res.Degraded = tallyDegraded(out, c.degradeSchedule(), "r0", c.SLOTTFT)
	}

	cancel()
	if err := g.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		return res, err
	}
	return res, nil
}

// startSweepReplicas starts c's simulated replicas under g, with the sim roles
// of roles (nil: none), and lists them in pcfg; index maps a replica's ID to
// its place in servers.
func startSweepReplicas(ctx context.Context, g *errgroup.Group, c *sweepConfig, pcfg *upstream.PoolConfig, roles []string) (servers []*sim.Server, index map[string]int, err error) {
	servers = make([]*sim.Server, c.Replicas)
	index = make(map[string]int, c.Replicas)
	for i, sc := range replicaConfigs(c) {
		if roles != nil {
			sc.Role = simRole(roles[i])
		}
		if c.KVEvents {
			sc.KVEventsEndpoint = "tcp://127.0.0.1:0"
		}
		srv, err := sim.New(sc, sim.Options{DrainTimeout: time.Second})
		if err != nil {
			return nil, nil, err
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			srv.Close()
			return nil, nil, err
		}
		servers[i] = srv
		g.Go(func() error { return srv.Serve(ctx, ln) })
		id := fmt.Sprintf("r%d", i)
		index[id] = i
		rc := upstream.ReplicaConfig{URL: "http://" + ln.Addr().String(), ID: id}
		if c.KVEvents {
			rc.KVEvents = &kvevents.Config{Endpoint: srv.KVEventsEndpoint(), Topic: sim.KVEventsTopic}
		}
		pcfg.Replicas = append(pcfg.Replicas, rc)
	}
	return servers, index, nil
}

// tally fills in res from the replayed requests and from the replicas' own
// prefix-cache counters; index maps a replica's ID to its place in servers,
// sloTTFT is the TTFT target of SLOAttainment.
func (res *PolicyResult) tally(out []RequestResult, servers []*sim.Server, index map[string]int, sloTTFT time.Duration) {
	var ttft, e2e []time.Duration
	res.PerReplica = make([]int, len(servers))
	for _, r := range out {
		if r.Held {
			res.Held++
		}
		if i, ok := index[r.Replica]; ok {
			res.PerReplica[i]++
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
		e2e = append(e2e, r.Timing.E2E)
	}
	res.TTFT, res.E2E = stats.Summarize(ttft), stats.Summarize(e2e)
	res.SLOAttainment = sloAttainment(ttft, len(out), sloTTFT)
	var q, h int64
	for _, s := range servers {
		st := s.Stats()
		q += st.PrefixQueryTokens
		h += st.PrefixHitTokens
	}
	if q > 0 {
		res.HitRate = float64(h) / float64(q)
	}
	res.PrefillTokens = q - h
	load := make([]float64, len(res.PerReplica))
	for i, n := range res.PerReplica {
		load[i] = float64(n)
	}
	res.LoadMaxMean, res.Jain = stats.MaxOverMean(load), stats.JainIndex(load)
}

// waitScraped waits until every replica has been scraped once, so the
// weighted policy's load signals exist from the first request.
func waitScraped(ctx context.Context, pool *upstream.Pool, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if !slices.ContainsFunc(pool.Replicas(), func(r upstream.ReplicaStatus) bool { return !r.Fresh }) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitEvents waits until the pool has received a KV-event batch from every
// replica: a PUB drops what it sends before the subscription reaches it, so
// each replica publishes AllBlocksCleared (its cache is empty) until one
// gets through.
func waitEvents(ctx context.Context, reg *prometheus.Registry, servers []*sim.Server, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		got := map[string]bool{}
		fams, err := reg.Gather()
		if err != nil {
			return err
		}
		for _, mf := range fams {
			if mf.GetName() != "triage_upstream_kv_events_batches_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "replica" && m.GetCounter().GetValue() > 0 {
						got[l.GetValue()] = true
					}
				}
			}
		}
		if len(got) == len(servers) {
			return nil
		}
		for _, s := range servers {
			s.ClearCache()
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("kv events: not every replica's stream reached the pool within %s", limit)
}

// Replay sends each request with send at its planned time, or once the
// same session's previous turn has finished if that is later (a chat client
// cannot send turn n+1 before it has read answer n). After the last
// arrival it waits up to drain, then cuts what is left.
func Replay(ctx context.Context, reqs []PreparedRequest, drain time.Duration, send func(context.Context, *PreparedRequest, bool) RequestResult) []RequestResult {
	out := make([]RequestResult, len(reqs))
	done := make([]chan struct{}, len(reqs))
	for i := range done {
		done[i] = make(chan struct{})
	}
	sendCtx, cut := context.WithCancel(ctx)
	defer cut()
	var wg sync.WaitGroup
	start := time.Now()
	timer := time.NewTimer(0)
	<-timer.C
	for i := range reqs {
		r := &reqs[i]
		if wait := time.Until(start.Add(r.Trace.At)); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-ctx.Done():
				timer.Stop()
			}
		}
		if ctx.Err() != nil {
			for j := i; j < len(reqs); j++ {
				out[j].Err = "not sent: " + ctx.Err().Error()
				close(done[j])
			}
			break
		}
		wg.Go(func() {
			defer close(done[i])
			if p := r.Trace.Prev; p >= 0 {
				select {
				case <-done[p]:
				default:
					out[i].Held = true
					select {
					case <-done[p]:
					case <-sendCtx.Done():
						out[i].Err = "not sent: " + sendCtx.Err().Error()
						return
					}
				}
			}
			sent := time.Since(start)
			out[i] = send(sendCtx, r, out[i].Held)
			out[i].sent, out[i].wasSent = sent, true
		})
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(drain):
		cut()
		<-finished
	case <-ctx.Done():
		cut()
		<-finished
	}
	return out
}

// sendChat sends one streaming chat request through the pool and times it.
func sendChat(ctx context.Context, pool *upstream.Pool, r *PreparedRequest, held bool) RequestResult {
	res := RequestResult{Held: held}
	start := time.Now()
	resp, err := pool.Do(ctx, &upstream.ForwardRequest{
		Method: http.MethodPost,
		Path:   "/v1/chat/completions",
		Header: http.Header{"Content-Type": {"application/json"}, "Accept": {"text/event-stream"}},
		Body:   r.Body,
		Routing: policy.Request{
			Prompt:      r.Trace.Prompt,
			InputTokens: r.Trace.InputTokens,
			User:        r.Trace.User,
			Session:     fmt.Sprintf("s%d", r.Trace.Session),
		},
	})
	if err != nil {
		res.Err = err.Error()
		return res
	}
	defer resp.Body.Close()
	res.Replica = resp.ReplicaID
	if resp.Status != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		res.Err = fmt.Sprintf("status %d: %s", resp.Status, strings.TrimSpace(string(b)))
		return res
	}
	st, err := sse.Read(resp.Body, start)
	res.Timing = st
	switch {
	case err != nil:
		res.Err = err.Error()
	case !st.Done || st.Events == 0:
		res.Err = "stream ended without [DONE]"
	default:
		res.OK = true
	}
	return res
}
