package vllmprefix

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/triage-gw/triage/bench/load"
	"github.com/triage-gw/triage/bench/report"
	"github.com/triage-gw/triage/cmd/triage-bench/internal/gatewayproc"
)

// Variant is one policy run: a replica policy, with the engines' KV events or without.
type Variant struct {
	Key     string // the --policies name
	Policy  string // pools.*.policy.name
	LMetric string // lmetric's variant, "" for other policies
	Events  bool   // the pool subscribes to the engines' KV-cache events
}

// Variants are the runs the benchmark knows, in report order.
var Variants = []Variant{
	{Key: "round-robin", Policy: "round-robin"},
	{Key: "least-request", Policy: "least-request"},
	{Key: "prefix-cache", Policy: "prefix-cache"},
	{Key: "prefix-cache+events", Policy: "prefix-cache", Events: true},
	{Key: "lmetric-sticky", Policy: "lmetric", LMetric: "sticky"},
	{Key: "lmetric-sticky+events", Policy: "lmetric", LMetric: "sticky", Events: true},
}

// config is everything the subcommand needs.
type config struct {
	Trace      TraceConfig   `json:"trace"`
	MaxTokens  int           `json:"max_tokens"`
	Policies   []string      `json:"policies"`
	Engine     engineConfig  `json:"engine"`
	PendingTTL time.Duration `json:"pending_ttl"`
	// TokenizeTimeout is kv_events.tokenize_timeout: the engines share two cores with the
	// load, so the 50ms default would route some requests by the guess.
	TokenizeTimeout time.Duration `json:"tokenize_timeout"`
	RequestTimeout  time.Duration `json:"request_timeout"`
	Bin             string        `json:"-"`
	Out             string        `json:"-"`
	Logs            string        `json:"-"`
}

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	c := &config{Trace: DefaultTraceConfig()}
	fs := flag.NewFlagSet("vllm-prefix", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&c.Trace.Sessions, "sessions", c.Trace.Sessions, "conversations, all running at once")
	fs.IntVar(&c.Trace.Turns, "turns", c.Trace.Turns, "user turns per conversation; each resends the conversation so far")
	fs.IntVar(&c.Trace.SystemPrompts, "system-prompts", c.Trace.SystemPrompts, "distinct system prompts the conversations share")
	fs.IntVar(&c.Trace.SystemWords, "system-words", c.Trace.SystemWords, "words per system prompt")
	fs.IntVar(&c.Trace.UserWords, "user-words", c.Trace.UserWords, "words per user message")
	seed := fs.Uint64("seed", c.Trace.Seed, "trace seed")
	fs.IntVar(&c.MaxTokens, "max-tokens", 24, "tokens per answer (ignore_eos: always this many)")
	policies := fs.String("policies", keys(Variants), "comma-separated runs, in order (+events: the pool routes on the engines' KV events)")
	fs.IntVar(&c.Engine.Blocks, "kv-blocks", 128, "KV-cache blocks per engine (--num-gpu-blocks-override); small, so that evictions happen")
	fs.IntVar(&c.Engine.BlockSize, "block-size", 32, "engine block size in tokens (a multiple of 32 on CPU)")
	fs.IntVar(&c.Engine.MaxLen, "max-model-len", 2048, "engine --max-model-len")
	fs.DurationVar(&c.Engine.Startup, "engine-startup", 7*time.Minute, "how long an engine may take to answer /health")
	fs.DurationVar(&c.PendingTTL, "pending-ttl", 2*time.Second, "kv_events.pending_ttl of the gateway's pool")
	fs.DurationVar(&c.TokenizeTimeout, "tokenize-timeout", time.Second, "kv_events.tokenize_timeout of the gateway's pool")
	fs.DurationVar(&c.RequestTimeout, "request-timeout", 120*time.Second, "client timeout per request")
	venv := fs.String("venv", ".deps/vllm-venv", "the vLLM virtual environment")
	model := fs.String("model", ".deps/tiny-llama", "the model folder the engines serve")
	fs.StringVar(&c.Bin, "bin", "bin/triage", "gateway binary")
	fs.StringVar(&c.Out, "out", "", "write results.json and table.md into this folder")
	fs.StringVar(&c.Logs, "logs", "", "write the engines' and gateways' logs and configs into this folder (default: a new temporary folder)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	c.Trace.Seed = *seed
	var errs []error
	errs = append(errs, c.Trace.Validate())
	for _, k := range strings.Split(*policies, ",") {
		k = strings.TrimSpace(k)
		if !slices.ContainsFunc(Variants, func(v Variant) bool { return v.Key == k }) {
			errs = append(errs, fmt.Errorf("--policies: unknown run %q (known: %s)", k, keys(Variants)))
			continue
		}
		c.Policies = append(c.Policies, k)
	}
	if c.MaxTokens < 1 || c.MaxTokens > 1024 {
		errs = append(errs, fmt.Errorf("--max-tokens: must be in [1, 1024], got %d", c.MaxTokens))
	}
	if c.Engine.BlockSize < 32 || c.Engine.BlockSize%32 != 0 {
		errs = append(errs, fmt.Errorf("--block-size: must be a positive multiple of 32 (vLLM on CPU), got %d", c.Engine.BlockSize))
	}
	if c.Engine.Blocks < 8 {
		errs = append(errs, fmt.Errorf("--kv-blocks: must be >= 8, got %d", c.Engine.Blocks))
	}
	if c.Engine.Blocks*c.Engine.BlockSize < c.Engine.MaxLen {
		errs = append(errs, fmt.Errorf("--max-model-len: %d does not fit in --kv-blocks × --block-size = %d tokens", c.Engine.MaxLen, c.Engine.Blocks*c.Engine.BlockSize))
	}
	for name, d := range map[string]time.Duration{"engine-startup": c.Engine.Startup, "tokenize-timeout": c.TokenizeTimeout, "request-timeout": c.RequestTimeout} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("--%s: must be > 0, got %s", name, d))
		}
	}
	if c.PendingTTL < 0 {
		errs = append(errs, fmt.Errorf("--pending-ttl: must be >= 0, got %s", c.PendingTTL))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	var err error
	if c.Engine.Python, err = filepath.Abs(filepath.Join(*venv, "bin", "python")); err != nil {
		return nil, err
	}
	if c.Engine.Model, err = filepath.Abs(*model); err != nil {
		return nil, err
	}
	if c.Bin, err = filepath.Abs(c.Bin); err != nil {
		return nil, err
	}
	return c, nil
}

func keys(vs []Variant) string {
	ks := make([]string, len(vs))
	for i, v := range vs {
		ks[i] = v.Key
	}
	return strings.Join(ks, ",")
}

// Run is "triage-bench vllm-prefix".
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if _, err := os.Stat(c.Bin); err != nil {
		return fmt.Errorf("gateway binary: %w (build it: make build)", err)
	}
	logDir := c.Logs
	if logDir == "" {
		if logDir, err = os.MkdirTemp("", "triage-vllm-prefix-"); err != nil {
			return err
		}
	} else if err := os.MkdirAll(logDir, 0o755); err != nil {
		return err
	}
	workdir, err := os.Getwd()
	if err != nil {
		return err
	}
	rep := &Report{Command: report.CommandLine("vllm-prefix", args), Machine: report.DescribeMachine(), Config: *c}
	client := load.NewClient(4, 10*time.Second)
	fmt.Fprintf(stderr, "starting 2 vLLM engines (%d blocks of %d tokens each); logs in %s\n", c.Engine.Blocks, c.Engine.BlockSize, logDir)
	start := time.Now()
	engines, err := startEngines(ctx, c.Engine, 2, runtime.NumCPU(), logDir, client)
	if err != nil {
		return err
	}
	defer func() {
		for _, e := range engines {
			e.stop()
		}
	}()
	rep.EngineStartup = time.Since(start).Round(time.Second).String()
	trace := NewTrace(c.Trace)
	for _, k := range c.Policies {
		i := slices.IndexFunc(Variants, func(v Variant) bool { return v.Key == k })
		fmt.Fprintf(stderr, "%s: running %d sessions × %d turns\n", k, c.Trace.Sessions, c.Trace.Turns)
		row, err := runVariant(ctx, c, Variants[i], engines, trace, workdir, logDir)
		if err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
		rep.Rows = append(rep.Rows, row)
	}
	return report.Publish(stdout, stderr, c.Out, rep, rep.Markdown())
}

// gatewayYAML is the gateway's config for variant v: the fast pool on both engines, the
// model the engines serve, v's policy, and with v.Events each engine's KV events on a
// socket the gateway binds (the engines connect). The slow pool, required by the config,
// names a model nobody asks for, so every request is pinned to the fast pool.
func gatewayYAML(c *config, v Variant, engines []*engine) string {
	var b strings.Builder
	b.WriteString("server:\n  request_timeout: 300s\npools:\n  fast:\n    model: " + ServedName + "\n    replicas:\n")
	for _, e := range engines {
		fmt.Fprintf(&b, "      - url: %s\n        id: %s\n", e.url, e.name)
		if v.Events {
			fmt.Fprintf(&b, "        kv_events: {endpoint: %q, topic: %s, mode: bind}\n", e.events, KVTopic)
		}
	}
	b.WriteString("    timeouts: {first_byte: 120s}\n")
	b.WriteString("    health_check: {interval: 2s, timeout: 2s, unhealthy_after: 3}\n")
	fmt.Fprintf(&b, "    policy: {name: %s", v.Policy)
	if v.LMetric != "" {
		fmt.Fprintf(&b, ", lmetric: {variant: %s}", v.LMetric)
	}
	b.WriteString("}\n")
	if v.Events {
		// block_size as the engines' --block-size, as an operator would set it: without it
		// the first requests, before any BlockStored, have no block size and are guessed.
		fmt.Fprintf(&b, "    kv_events: {pending_ttl: %s, tokenize_timeout: %s, block_size: %d}\n", c.PendingTTL, c.TokenizeTimeout, c.Engine.BlockSize)
	}
	fmt.Fprintf(&b, "  slow:\n    model: %s-unused\n    replicas:\n      - {url: %s, id: slow-0}\n", ServedName, engines[0].url)
	return b.String()
}

// runVariant starts a gateway for v, empties the engines' prefix caches, replays the trace
// and measures.
func runVariant(ctx context.Context, c *config, v Variant, engines []*engine, trace []Session, workdir, logDir string) (Row, error) {
	row := Row{Key: v.Key, Policy: v.Policy, Variant: v.LMetric, Events: v.Events}
	cfgPath := filepath.Join(logDir, "gateway-"+strings.ReplaceAll(v.Key, "+", "-")+".yaml")
	if err := os.WriteFile(cfgPath, []byte(gatewayYAML(c, v, engines)), 0o644); err != nil {
		return row, err
	}
	gw, err := gatewayproc.Start(ctx, gatewayproc.Config{Bin: c.Bin, Workdir: workdir, StartupTimeout: 2 * time.Minute},
		cfgPath, strings.TrimSuffix(cfgPath, ".yaml")+".log")
	if err != nil {
		return row, err
	}
	defer gw.Stop()
	if v.Events {
		// The engines reconnect to the gateway's sockets within their ZMQ reconnect interval.
		err := waitFor(ctx, time.Minute, func() bool {
			m, err := gw.Metrics(ctx)
			return err == nil && m.Sum("triage_upstream_kv_events_connected") >= float64(len(engines))
		})
		if err != nil {
			return row, fmt.Errorf("the engines' KV-event connections to the gateway: %w", err)
		}
	}
	cleared := func(m map[string]float64) float64 { return m["all_blocks_cleared"] }
	m0, err := gw.Metrics(ctx)
	if err != nil {
		return row, err
	}
	for _, e := range engines {
		if err := e.resetPrefixCache(ctx); err != nil {
			return row, err
		}
		// vLLM publishes the reset's AllBlocksCleared with the events of its next
		// step, which only a request makes: without one, the first requests would
		// be routed on blocks the engine no longer holds (events it queued while no
		// gateway listened, delivered when this one bound the socket).
		if err := e.step(ctx); err != nil {
			return row, err
		}
	}
	if v.Events {
		err := waitFor(ctx, 30*time.Second, func() bool {
			m, err := gw.Metrics(ctx)
			return err == nil && cleared(eventsByType(m)) >= cleared(eventsByType(m0))+float64(len(engines)) &&
				m.Sum("triage_upstream_kv_events_index_blocks") == 0
		})
		if err != nil {
			return row, fmt.Errorf("the engines' AllBlocksCleared after the reset, and an empty index: %w", err)
		}
	}
	before, err := scrapeEngines(ctx, engines)
	if err != nil {
		return row, err
	}
	start := time.Now()
	results := drive(ctx, c, gw.Base, trace)
	row.Wall = time.Since(start).Round(100 * time.Millisecond).String()
	after, err := settledCounters(ctx, engines)
	if err != nil {
		return row, err
	}
	gm, err := gw.Metrics(ctx)
	if err != nil {
		return row, err
	}
	row.fill(results, before, after, c.Engine.BlockSize)
	row.Tokenize = map[string]float64{}
	for _, r := range []string{"ok", "cached", "error", "skipped"} {
		if n := gm.Get(fmt.Sprintf(`triage_upstream_tokenize_total{pool="fast",result="%s"}`, r)); n > 0 {
			row.Tokenize[r] = n
		}
	}
	if n := gm.Sum("triage_upstream_tokenize_seconds_count"); n > 0 {
		row.TokenizeMeanMs = 1000 * gm.Sum("triage_upstream_tokenize_seconds_sum") / n
	}
	row.Fallbacks = gm.Sum("triage_upstream_kv_events_fallbacks_total")
	row.EventsReceived = eventsByType(gm)
	return row, nil
}

// eventsByType sums triage_upstream_kv_events_received_total by its type label.
func eventsByType(m map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for series, n := range m {
		if name, labels, ok := strings.Cut(series, "{"); ok && name == "triage_upstream_kv_events_received_total" {
			for _, l := range strings.Split(strings.TrimSuffix(labels, "}"), ",") {
				if t, ok := strings.CutPrefix(l, "type="); ok {
					out[strings.Trim(t, `"`)] += n
				}
			}
		}
	}
	return out
}

func waitFor(ctx context.Context, limit time.Duration, ok func() bool) error {
	deadline := time.Now().Add(limit)
	for !ok() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not after %s", limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return nil
}

func scrapeEngines(ctx context.Context, engines []*engine) ([]cacheCounters, error) {
	out := make([]cacheCounters, len(engines))
	for i, e := range engines {
		var err error
		if out[i], err = e.counters(ctx); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// settledCounters scrapes the engines until two scrapes half a second apart agree: the
// last answers' counters may land just after the client has read them.
func settledCounters(ctx context.Context, engines []*engine) ([]cacheCounters, error) {
	prev, err := scrapeEngines(ctx, engines)
	if err != nil {
		return nil, err
	}
	for range 10 {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
		cur, err := scrapeEngines(ctx, engines)
		if err != nil {
			return nil, err
		}
		if slices.Equal(cur, prev) {
			return cur, nil
		}
		prev = cur
	}
	return prev, nil
}

// result is one request of the trace.
type result struct {
	Session string
	Turn    int
	Replica string
	TTFT    time.Duration
	Outcome Outcome
	Usage   bool // the stream carried a usage chunk
	Err     string
}

// drive replays the trace through the gateway at base: every session at once, each
// session's turns one after another, each turn streamed with its usage. A failed turn ends
// its session (the next turn would need its answer).
func drive(ctx context.Context, c *config, base string, trace []Session) []result {
	client := load.NewClient(len(trace), c.RequestTimeout)
	defer client.CloseIdleConnections()
	var mu sync.Mutex
	var out []result
	var wg sync.WaitGroup
	for _, s := range trace {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers := make([]string, 0, len(s.Users))
			for turn := range s.Users {
				r, answer := ask(ctx, client, c, base, s, turn, answers)
				mu.Lock()
				out = append(out, r)
				mu.Unlock()
				if r.Err != "" {
					return
				}
				answers = append(answers, answer)
			}
		}()
	}
	wg.Wait()
	return out
}

// chatRequest is the streamed chat completion each turn sends.
type chatRequest struct {
	Model         string    `json:"model"`
	Messages      []Message `json:"messages"`
	MaxTokens     int       `json:"max_tokens"`
	Temperature   float64   `json:"temperature"`
	IgnoreEOS     bool      `json:"ignore_eos"`
	Stream        bool      `json:"stream"`
	StreamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

// chunk is the part of a streamed chat chunk the benchmark reads.
type chunk struct {
	Choices []struct {
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens        int `json:"prompt_tokens"`
		PromptTokensDetails *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

func ask(ctx context.Context, client *http.Client, c *config, base string, s Session, turn int, answers []string) (result, string) {
	r := result{Session: s.ID, Turn: turn}
	body := chatRequest{Model: ServedName, Messages: s.Conversation(turn, answers), MaxTokens: c.MaxTokens, IgnoreEOS: true, Stream: true}
	body.StreamOptions.IncludeUsage = true
	b, err := json.Marshal(body)
	if err != nil {
		r.Err = err.Error()
		return r, ""
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", bytes.NewReader(b))
	if err != nil {
		r.Err = err.Error()
		return r, ""
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("x-session-id", s.ID)
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		r.Err = err.Error()
		return r, ""
	}
	defer resp.Body.Close()
	r.Replica = resp.Header.Get("x-router-replica")
	if h := resp.Header.Get("x-router-predicted-cached-tokens"); h != "" {
		if n, err := strconv.Atoi(h); err == nil {
			r.Outcome.Predicted, r.Outcome.HasPrediction = n, true
		}
		r.Outcome.Pending, _ = strconv.Atoi(resp.Header.Get("x-router-pending-cached-tokens"))
	}
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		r.Err = fmt.Sprintf("status %d: %s", resp.StatusCode, bytes.TrimSpace(msg))
		return r, ""
	}
	answer, err := readStream(resp.Body, start, &r)
	if err != nil {
		r.Err = err.Error()
	}
	return r, answer
}

// readStream reads a chat stream to its end: the first event's time (TTFT), the answer's
// text and the usage chunk's prompt and cached tokens.
func readStream(body io.Reader, start time.Time, r *result) (string, error) {
	var answer strings.Builder
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	done := false
	for sc.Scan() {
		payload, ok := bytes.CutPrefix(sc.Bytes(), []byte("data:"))
		if !ok {
			continue
		}
		payload = bytes.TrimSpace(payload)
		if bytes.Equal(payload, []byte("[DONE]")) {
			done = true
			continue
		}
		if r.TTFT == 0 {
			r.TTFT = time.Since(start)
		}
		var ch chunk
		if err := json.Unmarshal(payload, &ch); err != nil {
			return "", fmt.Errorf("undecodable chunk: %w", err)
		}
		for _, c := range ch.Choices {
			answer.WriteString(c.Delta.Content)
		}
		if u := ch.Usage; u != nil {
			r.Usage = true
			r.Outcome.Prompt = u.PromptTokens
			if u.PromptTokensDetails != nil {
				r.Outcome.Cached = u.PromptTokensDetails.CachedTokens
			}
		}
	}
	switch {
	case sc.Err() != nil:
		return "", fmt.Errorf("read stream: %w", sc.Err())
	case !done:
		return "", errors.New("stream ended without [DONE]")
	case !r.Usage:
		return "", errors.New("stream without a usage chunk")
	}
	return answer.String(), nil
}
