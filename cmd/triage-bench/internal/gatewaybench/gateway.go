package gatewaybench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/triage-gw/triage/bench/dolly"
	"github.com/triage-gw/triage/bench/report"
	"github.com/triage-gw/triage/cmd/triage-bench/internal/gatewayproc"
)

// gatewayScenarios are the gateway subcommand's default scenarios, in run order.
var gatewayScenarios = []string{"seq-miss", "conc-miss", "conc-hit", "overload", "query-process", "proxy-cost"}

// extraScenarios run only when --scenarios names them (fail-open starts eleven gateways and
// takes about five minutes: make bench-fail-open; side-by-side about four: make
// bench-side-by-side), after the default ones.
var extraScenarios = []string{"fail-open", "side-by-side"}

// knownScenarios lists every scenario --scenarios accepts.
func knownScenarios() []string { return slices.Concat(gatewayScenarios, extraScenarios) }

// gatewayConfig is everything the gateway subcommand needs.
type gatewayConfig struct {
	Bin            string        `json:"triage_bin"`
	Config         string        `json:"config,omitempty"`
	Workdir        string        `json:"workdir"`
	Scenarios      []string      `json:"scenarios"`
	Duration       time.Duration `json:"duration_ns,omitempty"` // 0: each scenario's default
	Seed           uint64        `json:"seed"`
	SeqRequests    int           `json:"seq_requests"`
	MissClients    int           `json:"miss_clients"`
	HitClients     int           `json:"hit_clients"`
	HitTexts       int           `json:"hit_texts"`
	TextWords      int           `json:"text_words,omitempty"`
	OverloadFactor float64       `json:"overload_factor"`
	OverloadRate   float64       `json:"overload_rate,omitempty"`
	OverloadFlight int           `json:"overload_max_in_flight"`
	QPClients      int           `json:"query_process_clients"`
	QPTexts        int           `json:"query_process_texts"`
	QPRamp         float64       `json:"query_process_ramp"`
	ProxyClients   []int         `json:"proxy_clients"`
	// FailOpenClients, FailOpenWords and FailOpenBudgets shape the fail-open scenario.
	FailOpenClients int             `json:"fail_open_clients"`
	FailOpenWords   int             `json:"fail_open_words"`
	FailOpenBudgets []time.Duration `json:"fail_open_budgets_ns"`
	// SideClients, SideRepeats and SideRequests shape the side-by-side scenario.
	SideClients  []int `json:"side_clients"`
	SideRepeats  int   `json:"side_repeats"`
	SideRequests []int `json:"side_requests"` // per cell, one for each of SideClients
	// SideGatewayYAML is appended to the side-by-side gateway's generated config.
	SideGatewayYAML string        `json:"side_gateway_yaml,omitempty"`
	RequestTimeout  time.Duration `json:"request_timeout_ns"`
	StartupTimeout  time.Duration `json:"startup_timeout_ns"`

	dolly string
	out   string
}

// ownGateway are the scenarios that start gateways of their own, after the others.
var ownGateway = []string{"proxy-cost", "fail-open", "side-by-side"}

// scenarioDefaults are the durations used when --duration is 0.
var scenarioDefaults = map[string]time.Duration{
	"seq-miss":      10 * time.Second,
	"conc-miss":     10 * time.Second,
	"conc-hit":      10 * time.Second, // each: the gateway, then the baseline
	"overload":      15 * time.Second,
	"query-process": 20 * time.Second,
	"proxy-cost":    10 * time.Second, // per client count
	"fail-open":     15 * time.Second, // per variant, and direct
}

func (c *gatewayConfig) duration(scenario string) time.Duration {
	if c.Duration > 0 {
		return c.Duration
	}
	return scenarioDefaults[scenario]
}

// gatewayUsage heads the gateway subcommand's -h; the client counts are
// filled in by fs.Usage.
const gatewayUsage = `Usage: triage-bench gateway [flags]

Starts the gateway (--triage-bin) as a subprocess on a free 127.0.0.1 port,
waits for /readyz and runs the scenarios, each bounded in time and count:

  seq-miss       one sequential client, distinct texts (cache misses) on
                 /v1/classify: x-router-latency and client latency p50/p99
                 against the single-text inference time
  conc-miss      %d clients, distinct texts on /v1/classify: texts/s,
                 latency p50/p99, tokens per text
  conc-hit       %d clients, warmed texts (cache hits) on /v1/classify: req/s
                 and p99, beside the same client against a bare net/http
                 server (triage-bench hello, a separate process)
  overload       open-loop cache misses at 10× conc-miss's texts/s: status
                 counts, p99 of accepted requests, gateway RSS before, peak
                 and after
  query-process  %d clients on /v1/query-process with the built-in simulated
                 pools: decision reasons over time as the slow semaphore fills
  proxy-cost     streaming /v1/chat/completions TTFT through a second gateway
                 whose pools point at an in-process zero-latency mockllm,
                 minus TTFT direct to it (1 and 8 clients)
  side-by-side   (only when named) one simulated replica (20 ms to first
                 token) direct, behind Go's httputil.ReverseProxy and behind the
                 gateway with cache hits and with cache misses (Dolly
                 instructions with a unique reference tag), at --side-clients,
                 non-streamed and streamed, --side-repeats alternating repeats:
                 added latency p50/p99, CPU per 1,000 requests, the goals
  fail-open      (only when named) %d clients, streaming chat with a new ~256-token prompt
                 each, direct to an in-process mockllm and through a gateway
                 per variant (before fail-open, and each --fail-open-budgets;
                 cascade on and off): TTFT p50/p99 and errors

Traffic goes to 127.0.0.1 only. Flags:
`

func parseGatewayFlags(args []string, stderr io.Writer) (*gatewayConfig, error) {
	fs := flag.NewFlagSet("triage-bench gateway", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := &gatewayConfig{}
	scenarios := strings.Join(gatewayScenarios, ",")
	proxyClients := "1,8"
	budgets := "50ms"
	sideClients, sideRequests := "1,16", "200,800"
	c.bindFlags(fs, &scenarios, &proxyClients)
	fs.StringVar(&sideClients, "side-clients", sideClients, "comma-separated client counts of side-by-side (the p50 goal is checked at the smallest, the p99 and CPU goals at the largest)")
	fs.IntVar(&c.SideRepeats, "side-repeats", 3, "alternating repeats of side-by-side")
	fs.StringVar(&c.SideGatewayYAML, "side-gateway-yaml", "", "YAML appended to the side-by-side gateway's config, to measure a setting other than the default (e.g. 'cascade: {narrow_from: 0, narrow_to: 2}'); the report's config file shows it")
	fs.StringVar(&sideRequests, "side-requests", sideRequests, "comma-separated measured requests per side-by-side cell (path, client count, mode, repeat), one for each of --side-clients")
	fs.IntVar(&c.FailOpenClients, "fail-open-clients", 32, "concurrent clients of fail-open")
	fs.IntVar(&c.FailOpenWords, "fail-open-words", 190, "words of every fail-open prompt (about 190 words is 256 word pieces)")
	fs.StringVar(&budgets, "fail-open-budgets", budgets, "comma-separated routing.classify_budget values fail-open measures (each with fallback fast), beside the behaviour before fail-open")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), gatewayUsage, 32, 64, 100, 32)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("gateway: unexpected arguments %q", fs.Args())
	}
	errs := c.setLists(scenarios, proxyClients)
	errs = append(errs, c.setBudgets(budgets)...)
	errs = append(errs, c.setSideLists(sideClients, sideRequests)...)
	errs = append(errs, c.validate()...)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return c, nil
}

// bindFlags defines the gateway subcommand's flags on fs, into c and, for
// the two comma-separated lists, into scenarios and proxyClients, whose
// current values are the defaults.
func (c *gatewayConfig) bindFlags(fs *flag.FlagSet, scenarios, proxyClients *string) {
	fs.StringVar(&c.Bin, "triage-bin", "bin/triage", "gateway binary to start (build it with: go build -o bin/ ./cmd/...)")
	fs.StringVar(&c.Config, "config", "", "gateway config for the scenarios other than proxy-cost (empty: built-in defaults and simulated pools)")
	fs.StringVar(&c.Workdir, "workdir", ".", "working directory of the gateway (its default model paths are relative to the repository root)")
	fs.StringVar(scenarios, "scenarios", *scenarios, "comma-separated scenarios to run, in this order: "+strings.Join(knownScenarios(), ", ")+" (fail-open and side-by-side only when named)")
	fs.DurationVar(&c.Duration, "duration", 0, "length of every scenario; 0 means each scenario's default (seq-miss, conc-miss 10s; conc-hit 10s for the gateway and 10s for the baseline; overload 15s; query-process 20s; proxy-cost 10s per client count)")
	fs.Uint64Var(&c.Seed, "seed", 1, "seed of the text order and of the overload arrivals")
	fs.IntVar(&c.SeqRequests, "seq-requests", 2000, "cap on seq-miss requests")
	fs.IntVar(&c.MissClients, "miss-clients", 32, "concurrent clients of conc-miss")
	fs.IntVar(&c.HitClients, "hit-clients", 64, "concurrent clients of conc-hit (gateway and baseline)")
	fs.IntVar(&c.HitTexts, "hit-texts", 64, "texts warmed into the cache for conc-hit")
	fs.IntVar(&c.TextWords, "text-words", 0, "make every cache-miss text exactly this many words (Dolly texts joined; about 190 words is 256 word pieces); 0 keeps Dolly's own lengths")
	fs.Float64Var(&c.OverloadFactor, "overload-factor", 10, "overload arrival rate as a multiple of conc-miss's measured texts/s")
	fs.Float64Var(&c.OverloadRate, "overload-rate", 0, "overload arrival rate in requests/s (0: --overload-factor × conc-miss capacity, measured in a 3 s probe if conc-miss did not run)")
	fs.IntVar(&c.OverloadFlight, "overload-max-in-flight", 2000, "client-side bound on outstanding overload requests; arrivals beyond it are dropped and counted")
	fs.IntVar(&c.QPClients, "qp-clients", 100, "concurrent clients of query-process")
	fs.Float64Var(&c.QPRamp, "qp-ramp", 0.5, "share of the query-process run over which its clients join one by one, so the slow semaphore fills gradually")
	fs.IntVar(&c.QPTexts, "qp-texts", 64, "distinct texts query-process cycles over (warmed into the result cache first)")
	fs.StringVar(proxyClients, "proxy-clients", *proxyClients, "comma-separated client counts of proxy-cost")
	fs.DurationVar(&c.RequestTimeout, "request-timeout", 40*time.Second, "client timeout of one request (above the gateway's own 30 s request_timeout, so its 504s are seen as answers)")
	fs.DurationVar(&c.StartupTimeout, "startup-timeout", 3*time.Minute, "how long to wait for the gateway's /readyz")
	fs.StringVar(&c.dolly, "dolly", dolly.DefaultPath, "Dolly JSONL file the texts come from")
	fs.StringVar(&c.out, "out", "", "directory for results.json, table.md and the gateway logs (empty: stdout only, logs in a temp dir)")
}

// setLists parses the comma-separated --scenarios and --proxy-clients into
// c, skipping empty items, and returns an error for every bad one.
func (c *gatewayConfig) setLists(scenarios, proxyClients string) []error {
	var errs []error
	for _, s := range strings.Split(scenarios, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		if !slices.Contains(knownScenarios(), s) {
			errs = append(errs, fmt.Errorf("gateway: unknown scenario %q (want %s)", s, strings.Join(knownScenarios(), ", ")))
			continue
		}
		c.Scenarios = append(c.Scenarios, s)
	}
	for _, p := range strings.Split(proxyClients, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 {
			errs = append(errs, fmt.Errorf("gateway: --proxy-clients: %q is not a count >= 1", p))
			continue
		}
		c.ProxyClients = append(c.ProxyClients, n)
	}
	return errs
}

// setSideLists parses the comma-separated --side-clients and --side-requests into c: as
// many request counts as client counts.
func (c *gatewayConfig) setSideLists(clients, requests string) []error {
	var errs []error
	for _, l := range []struct {
		flag, list string
		into       *[]int
	}{{"side-clients", clients, &c.SideClients}, {"side-requests", requests, &c.SideRequests}} {
		for _, p := range strings.Split(l.list, ",") {
			if p = strings.TrimSpace(p); p == "" {
				continue
			}
			n, err := strconv.Atoi(p)
			if err != nil || n < 1 {
				errs = append(errs, fmt.Errorf("gateway: --%s: %q is not a count >= 1", l.flag, p))
				continue
			}
			*l.into = append(*l.into, n)
		}
	}
	switch {
	case len(c.SideClients) == 0:
		errs = append(errs, errors.New("gateway: --side-clients is empty"))
	case len(errs) == 0 && len(c.SideRequests) != len(c.SideClients):
		errs = append(errs, fmt.Errorf("gateway: --side-requests has %d counts, want one for each of the %d --side-clients", len(c.SideRequests), len(c.SideClients)))
	}
	return errs
}

// proc is how gatewayproc starts the gateway under test.
func (c *gatewayConfig) proc() gatewayproc.Config {
	return gatewayproc.Config{Bin: c.Bin, Workdir: c.Workdir, StartupTimeout: c.StartupTimeout}
}

// setBudgets parses the comma-separated --fail-open-budgets into c.
func (c *gatewayConfig) setBudgets(list string) []error {
	var errs []error
	for _, p := range strings.Split(list, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		d, err := time.ParseDuration(p)
		if err != nil || d <= 0 {
			errs = append(errs, fmt.Errorf("gateway: --fail-open-budgets: %q is not a duration > 0", p))
			continue
		}
		c.FailOpenBudgets = append(c.FailOpenBudgets, d)
	}
	return errs
}

// validate returns an error for every out-of-range field, named by its flag.
func (c *gatewayConfig) validate() []error {
	var errs []error
	if len(c.Scenarios) == 0 {
		errs = append(errs, errors.New("gateway: --scenarios is empty"))
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"seq-requests", c.SeqRequests}, {"miss-clients", c.MissClients}, {"hit-clients", c.HitClients},
		{"hit-texts", c.HitTexts}, {"overload-max-in-flight", c.OverloadFlight}, {"qp-clients", c.QPClients}, {"qp-texts", c.QPTexts},
		{"fail-open-clients", c.FailOpenClients}, {"fail-open-words", c.FailOpenWords},
		{"side-repeats", c.SideRepeats}} {
		if f.v < 1 {
			errs = append(errs, fmt.Errorf("gateway: --%s must be >= 1, got %d", f.name, f.v))
		}
	}
	if !(c.QPRamp >= 0 && c.QPRamp < 1) {
		errs = append(errs, fmt.Errorf("gateway: --qp-ramp must be in [0, 1), got %v", c.QPRamp))
	}
	if c.Duration < 0 {
		errs = append(errs, fmt.Errorf("gateway: --duration must be >= 0, got %s", c.Duration))
	}
	if !(c.OverloadFactor > 0) {
		errs = append(errs, fmt.Errorf("gateway: --overload-factor must be > 0, got %v", c.OverloadFactor))
	}
	if c.OverloadRate < 0 {
		errs = append(errs, fmt.Errorf("gateway: --overload-rate must be >= 0, got %v", c.OverloadRate))
	}
	if c.RequestTimeout <= 0 || c.StartupTimeout <= 0 {
		errs = append(errs, errors.New("gateway: --request-timeout and --startup-timeout must be > 0"))
	}
	return errs
}

// gwEnv is what scenarios share: the running gateway, text sources and
// what earlier scenarios measured.
type gwEnv struct {
	cfg    *gatewayConfig
	gw     *gatewayproc.Gateway
	rows   []dolly.Row
	misses *TextSource // distinct texts, shared so no scenario repeats another's
	logDir string
	stderr io.Writer

	missCapacity float64 // texts/s measured by conc-miss, 0 before
}

func (e *gwEnv) url(path string) string { return e.gw.Base + path }

// Run is the gateway subcommand.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := parseGatewayFlags(args, stderr)
	if err != nil {
		return err
	}
	if c.Bin, err = filepath.Abs(c.Bin); err != nil {
		return err
	}
	if _, err := os.Stat(c.Bin); err != nil {
		return fmt.Errorf("gateway binary: %w (build it: CGO_LDFLAGS=-L$PWD/.deps/tokenizers go build -o bin/ ./cmd/...)", err)
	}
	if c.Config != "" {
		if c.Config, err = filepath.Abs(c.Config); err != nil {
			return err
		}
	}
	rows, err := dolly.Load(c.dolly)
	if err != nil {
		return err
	}
	misses, err := NewTextSource(rows, c.Seed, true)
	if err == nil && c.TextWords > 0 {
		misses.lengthen(c.TextWords)
	}
	if err != nil {
		return err
	}
	logDir := c.out
	if logDir == "" {
		if logDir, err = os.MkdirTemp("", "triage-bench-"); err != nil {
			return err
		}
	} else if err := os.MkdirAll(logDir, 0o755); err != nil {
		return err
	}
	env := &gwEnv{cfg: c, rows: rows, misses: misses, logDir: logDir, stderr: stderr}
	rep := &GatewayReport{Command: report.CommandLine("gateway", args), Machine: report.DescribeMachine(), Config: c}

	needMain := slices.ContainsFunc(c.Scenarios, func(s string) bool { return !slices.Contains(ownGateway, s) })
	if needMain {
		logPath := filepath.Join(logDir, "gateway.log")
		fmt.Fprintf(stderr, "starting %s (log %s) ...\n", c.Bin, logPath)
		gw, err := gatewayproc.Start(ctx, c.proc(), c.Config, logPath)
		if err != nil {
			return err
		}
		env.gw = gw
		fmt.Fprintf(stderr, "gateway ready at %s after %.1fs\n", gw.Base, gw.Startup.Seconds())
		rep.Startup = gw.Startup.Seconds()
		err = runMainScenarios(ctx, env, rep)
		if serr := gw.Stop(); err == nil && serr != nil {
			err = fmt.Errorf("stop gateway: %w", serr)
		}
		if err != nil {
			return err
		}
	}
	// These start their own gateways.
	for _, sc := range []struct {
		name string
		fn   func(context.Context, *gwEnv) (report.Scenario, error)
	}{{"proxy-cost", scenarioProxyCost}, {"fail-open", scenarioFailOpen}, {"side-by-side", scenarioSideBySide}} {
		name, fn := sc.name, sc.fn
		if !slices.Contains(c.Scenarios, name) {
			continue
		}
		fmt.Fprintf(stderr, "scenario %s ...\n", name)
		start := time.Now()
		res, err := fn(ctx, env)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		res.Wall = time.Since(start).Seconds()
		rep.Scenarios = append(rep.Scenarios, res)
	}
	return rep.Write(stdout, stderr, c.out)
}

func runMainScenarios(ctx context.Context, env *gwEnv, rep *GatewayReport) error {
	run := map[string]func(context.Context, *gwEnv) (report.Scenario, error){
		"seq-miss":      scenarioSeqMiss,
		"conc-miss":     scenarioConcMiss,
		"conc-hit":      scenarioConcHit,
		"overload":      scenarioOverload,
		"query-process": scenarioQueryProcess,
	}
	for _, name := range env.cfg.Scenarios {
		fn, ok := run[name]
		if !ok {
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := env.gw.WaitIdle(ctx, time.Minute); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		fmt.Fprintf(env.stderr, "scenario %s ...\n", name)
		start := time.Now()
		res, err := fn(ctx, env)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		res.Wall = time.Since(start).Seconds()
		for _, m := range res.Summary {
			fmt.Fprintf(env.stderr, "  %s: %s\n", m.Name, m.Value)
		}
		rep.Scenarios = append(rep.Scenarios, res)
		if !env.gw.Alive() {
			return fmt.Errorf("gateway exited during %s; see %s", name, env.gw.LogPath)
		}
	}
	return nil
}
