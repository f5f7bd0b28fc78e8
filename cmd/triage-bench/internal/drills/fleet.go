package drills

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/triage-gw/triage/bench/dolly"
	"github.com/triage-gw/triage/bench/report"
	"github.com/triage-gw/triage/bench/trace"
	"github.com/triage-gw/triage/cmd/triage-bench/internal/sweep"
	"github.com/triage-gw/triage/sim"
)

// fleetParts are the fleet subcommand's parts, in run order.
var fleetParts = []string{"budget", "drills", "affinity"}

func (c *fleetConfig) runs(part string) bool { return slices.Contains(c.Parts, part) }

// fleetConfig is everything the fleet subcommand needs.
type fleetConfig struct {
	Bin            string        `json:"triage_bin"`
	Mockllm        string        `json:"mockllm_bin"`
	Redis          string        `json:"redis_server"`
	Workdir        string        `json:"workdir"`
	Gateways       int           `json:"gateways"`
	MaxSlow        int           `json:"max_slow_concurrency"`
	SlowReplicas   int           `json:"slow_replicas"`
	BudgetClients  int           `json:"budget_clients"`
	BudgetTokens   int           `json:"budget_max_tokens"`
	BudgetDuration time.Duration `json:"budget_duration_ns"`
	Poll           time.Duration `json:"poll_interval_ns"`
	CacheTexts     int           `json:"cache_texts"`
	CacheRepeats   int           `json:"cache_repeats"`
	CacheClients   int           `json:"cache_clients"`
	LatencyClients int           `json:"latency_clients"`
	LatencyTime    time.Duration `json:"latency_duration_ns"`
	DrillDuration  time.Duration `json:"drill_duration_ns"`
	DrillSettle    time.Duration `json:"drill_settle_ns"`
	Parts          []string      `json:"parts"`
	Policies       []string      `json:"trace_policies"`
	TraceReplicas  int           `json:"trace_replicas"`
	AffinityRuns   int           `json:"affinity_runs"`
	LoadInterval   time.Duration `json:"load_interval_ns,omitempty"`
	MaxTokens      int           `json:"trace_max_tokens"`
	Drain          time.Duration `json:"trace_drain_ns"`
	Trace          trace.Config  `json:"trace"`
	Sim            sim.Config    `json:"-"`
	RequestTimeout time.Duration `json:"request_timeout_ns"`
	StartupTimeout time.Duration `json:"startup_timeout_ns"`
	Seed           uint64        `json:"seed"`

	dolly  string
	out    string
	logDir string
}

const fleetUsage = `Usage: triage-bench fleet [flags]

Fleet mode measured with real processes on 127.0.0.1: a redis-server on a free port,
mockllm replicas (--mockllm-bin) and gateways (--triage-bin) with generated configs,
and a client that spreads requests round-robin over the gateways. Each measure runs
with 1 gateway in local mode and with --gateways gateways in fleet mode:

  (a) budget    every request wants the slow pool (decision.base 0.01); the sum of
                the gateways' slow requests in flight, polled every --poll, against
                decision.max_slow_concurrency
  (b) cache     --cache-texts texts, each sent --cache-repeats times in a shuffled
                order to /v1/classify: result-cache hit rate
  (c) affinity  the multi-turn trace of "triage-bench policies", replayed through the
                gateways (also with fleet.affinity off): prefix-cache hit rate at the
                replicas and mean TTFT
  (d) latency   streaming TTFT through gateway 0 minus TTFT direct to a replica,
                fleet mode against local mode
  drills        kill -9 one gateway, and kill and restart redis-server, each in the
                middle of a budget run: failed requests and the time until the
                whole budget is in use again

Flags:
`

// bindFlags defines the fleet subcommand's flags on fs, into c, whose values are the
// defaults; policies receives the comma-separated --policies.
func (c *fleetConfig) bindFlags(fs *flag.FlagSet, policies *string) {
	fs.StringVar(&c.Bin, "triage-bin", "bin/triage", "gateway binary")
	fs.StringVar(&c.Mockllm, "mockllm-bin", "bin/mockllm", "simulated replica binary")
	fs.StringVar(&c.Redis, "redis-server", "redis-server", "redis-server binary (scripts/setup.sh redis installs it)")
	fs.StringVar(&c.Workdir, "workdir", ".", "working directory of the gateways (their default model paths are relative to the repository root)")
	fs.IntVar(&c.Gateways, "gateways", 3, "gateways in fleet mode")
	fs.IntVar(&c.MaxSlow, "max-slow", 12, "decision.max_slow_concurrency: the fleet's slow slots")
	fs.IntVar(&c.SlowReplicas, "slow-replicas", 2, "slow-pool replicas of (a), (b), (d) and the drills")
	fs.IntVar(&c.BudgetClients, "budget-clients", 36, "closed-loop clients of (a) and the drills (3 × --max-slow: demand above the budget)")
	fs.IntVar(&c.BudgetTokens, "budget-max-tokens", 16, "max_tokens of (a) requests (20 ms per token at the replica)")
	fs.DurationVar(&c.BudgetDuration, "budget-duration", 10*time.Second, "length of (a)")
	fs.DurationVar(&c.Poll, "poll", 20*time.Millisecond, "interval of the /metrics polls that sum the slow requests in flight")
	fs.IntVar(&c.CacheTexts, "cache-texts", 150, "distinct texts of (b)")
	fs.IntVar(&c.CacheRepeats, "cache-repeats", 4, "times each text of (b) is sent")
	fs.IntVar(&c.CacheClients, "cache-clients", 8, "closed-loop clients of (b)")
	fs.IntVar(&c.LatencyClients, "latency-clients", 4, "closed-loop clients of (d)")
	fs.DurationVar(&c.LatencyTime, "latency-duration", 6*time.Second, "length of (d) per mode")
	fs.DurationVar(&c.DrillSettle, "drill-settle", 6*time.Second, "pause between a drill's warm-up and its load (more than fleet.slots.lease_ttl, 5s: a gateway that rejoined holds its grant that long)")
	fs.DurationVar(&c.DrillDuration, "drill-duration", 16*time.Second, "length of each drill; the fault comes at a quarter of it (redis-server restarts at half)")
	fs.StringVar(policies, "policies", *policies, "comma-separated replica policies (c) runs with (lmetric-sticky: lmetric, variant sticky)")
	fs.IntVar(&c.TraceReplicas, "trace-replicas", 4, "replicas of (c), fresh for every run")
	fs.DurationVar(&c.LoadInterval, "load-interval", 0, "the gateways' fleet.affinity.load_interval (0: their default)")
	fs.IntVar(&c.AffinityRuns, "affinity-runs", 1, "times (c) runs each mode, interleaved (local, fleet, affinity off, local, ...); the summary shows their medians")
	fs.IntVar(&c.MaxTokens, "max-tokens", 16, "max_tokens of (c) requests")
	fs.DurationVar(&c.Drain, "drain", 20*time.Second, "after (c)'s last arrival, how long to wait for answers")
	fs.DurationVar(&c.RequestTimeout, "request-timeout", 40*time.Second, "client timeout of one request")
	fs.DurationVar(&c.StartupTimeout, "startup-timeout", 3*time.Minute, "how long to wait for a gateway's /readyz")
	fs.Uint64Var(&c.Seed, "seed", 1, "seed of the text order of (a) and (b); the trace has --trace-seed")
	fs.StringVar(&c.dolly, "dolly", dolly.DefaultPath, "Dolly JSONL file the texts and the trace come from")
	fs.StringVar(&c.out, "out", "", "directory for results.json, table.md, the generated configs and every process's log (empty: stdout only, logs in a temp dir)")
}

func parseFleetFlags(args []string, stderr io.Writer) (*fleetConfig, error) {
	fs := flag.NewFlagSet("triage-bench fleet", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := &fleetConfig{Sim: sweep.DefaultSim(), Trace: trace.DefaultConfig()}
	policies, parts := "lmetric-sticky", strings.Join(fleetParts, ",")
	c.bindFlags(fs, &policies)
	fs.StringVar(&parts, "parts", parts, "comma-separated parts to run: budget ((a), (b), (d)), drills, affinity ((c))")
	bindPrefixedTraceFlags(fs, &c.Trace)
	fs.Usage = func() { fmt.Fprint(fs.Output(), fleetUsage); fs.PrintDefaults() }
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("fleet: unexpected arguments %q", fs.Args())
	}
	var errs []error
	for _, p := range strings.Split(policies, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		if _, err := sweep.PolicyConfig(p, 0, 0); err != nil {
			errs = append(errs, err)
		}
		c.Policies = append(c.Policies, p)
	}
	for _, p := range strings.Split(parts, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		if !slices.Contains(fleetParts, p) {
			errs = append(errs, fmt.Errorf("fleet: unknown part %q (want %s)", p, strings.Join(fleetParts, ", ")))
		}
		c.Parts = append(c.Parts, p)
	}
	c.Sim.DefaultMaxTokens = c.MaxTokens
	c.Sim.MaxOutputTokens = max(c.Sim.MaxOutputTokens, c.MaxTokens)
	errs = append(errs, c.validate()...)
	return c, errors.Join(errs...)
}

// bindPrefixedTraceFlags defines the trace's flags as the policies sweep has them, with
// "trace-" in front.
func bindPrefixedTraceFlags(fs *flag.FlagSet, t *trace.Config) {
	tfs := flag.NewFlagSet("trace", flag.ContinueOnError)
	sweep.BindTraceFlags(tfs, t)
	tfs.VisitAll(func(f *flag.Flag) { fs.Var(f.Value, "trace-"+f.Name, f.Usage) })
}

// validate returns an error for every out-of-range field, named by its flag.
func (c *fleetConfig) validate() []error {
	var errs []error
	for _, f := range []struct {
		name string
		v    int
	}{{"gateways", c.Gateways}, {"max-slow", c.MaxSlow}, {"slow-replicas", c.SlowReplicas}, {"budget-clients", c.BudgetClients},
		{"budget-max-tokens", c.BudgetTokens}, {"cache-texts", c.CacheTexts}, {"cache-repeats", c.CacheRepeats}, {"cache-clients", c.CacheClients},
		{"latency-clients", c.LatencyClients}, {"trace-replicas", c.TraceReplicas}, {"affinity-runs", c.AffinityRuns}, {"max-tokens", c.MaxTokens}} {
		if f.v < 1 {
			errs = append(errs, fmt.Errorf("fleet: --%s must be >= 1, got %d", f.name, f.v))
		}
	}
	for _, f := range []struct {
		name string
		v    time.Duration
	}{{"budget-duration", c.BudgetDuration}, {"poll", c.Poll}, {"latency-duration", c.LatencyTime}, {"drill-duration", c.DrillDuration},
		{"drain", c.Drain}, {"request-timeout", c.RequestTimeout}, {"startup-timeout", c.StartupTimeout}} {
		if f.v <= 0 {
			errs = append(errs, fmt.Errorf("fleet: --%s must be > 0, got %s", f.name, f.v))
		}
	}
	if len(c.Policies) == 0 {
		errs = append(errs, errors.New("fleet: --policies is empty"))
	}
	if c.DrillSettle < 0 {
		errs = append(errs, fmt.Errorf("fleet: --drill-settle must be >= 0, got %s", c.DrillSettle))
	}
	if len(c.Parts) == 0 {
		errs = append(errs, errors.New("fleet: --parts is empty"))
	}
	return append(errs, c.Sim.Validate(), c.Trace.Validate())
}

// Run is the fleet subcommand.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := parseFleetFlags(args, stderr)
	if err != nil {
		return err
	}
	for _, p := range []*string{&c.Bin, &c.Mockllm} {
		if *p, err = filepath.Abs(*p); err != nil {
			return err
		}
		if _, err := os.Stat(*p); err != nil {
			return fmt.Errorf("%w (build it: CGO_LDFLAGS=-L$PWD/.deps/tokenizers go build -o bin/ ./cmd/...)", err)
		}
	}
	if c.logDir = c.out; c.logDir == "" {
		if c.logDir, err = os.MkdirTemp("", "triage-bench-fleet-"); err != nil {
			return err
		}
	} else if err := os.MkdirAll(c.logDir, 0o755); err != nil {
		return err
	}
	rows, err := dolly.Load(c.dolly)
	if err != nil {
		return err
	}
	rep := &FleetReport{Command: report.CommandLine("fleet", args), Machine: report.DescribeMachine(), Config: c}
	if err := runFleetMeasures(ctx, c, rows, rep, stderr); err != nil {
		return err
	}
	return rep.Write(stdout, stderr, c.out)
}
