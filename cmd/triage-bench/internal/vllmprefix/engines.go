package vllmprefix

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/triage-gw/triage/bench/promtext"
	"github.com/triage-gw/triage/internal/childproc"
)

// ServedName is the model name the engines serve; the gateway's pool asks for it.
const ServedName = "tiny-llama"

// KVTopic is the topic the engines publish their KV-cache events under.
const KVTopic = "kv-events"

// engineConfig is how the engines are started (as the engine suite, tests/engines.py,
// starts them, plus KV-cache events and the dev-mode cache reset).
type engineConfig struct {
	Python    string // the vLLM venv's python
	Model     string // the model folder
	BlockSize int
	Blocks    int // --num-gpu-blocks-override: the KV cache, per engine
	MaxLen    int
	Startup   time.Duration
}

// engine is one vLLM OpenAI-compatible server, pinned to one core.
type engine struct {
	name    string
	url     string
	events  string // the ZMQ endpoint it connects to (the gateway binds it)
	logPath string
	p       *childproc.Proc
	client  *http.Client
}

// startEngines starts n engines side by side (engine i on core i mod cpus) and waits until
// each answers /health; on failure it stops them all and says why, with the log's tail.
func startEngines(ctx context.Context, c engineConfig, n, cpus int, logDir string, client *http.Client) ([]*engine, error) {
	for what, path := range map[string]string{"engine venv": c.Python, "model": filepath.Join(c.Model, "config.json")} {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("%s missing: %w (run `make setup-vllm`)", what, err)
		}
	}
	var es []*engine
	stopAll := func() {
		for _, e := range es {
			e.stop()
		}
	}
	for i := range n {
		addr, err := childproc.FreeAddr()
		if err != nil {
			stopAll()
			return nil, err
		}
		ev, err := childproc.FreeAddr()
		if err != nil {
			stopAll()
			return nil, err
		}
		_, port, _ := strings.Cut(addr, ":")
		e := &engine{name: fmt.Sprintf("vllm-%d", i), url: "http://" + addr, events: "tcp://" + ev,
			logPath: filepath.Join(logDir, fmt.Sprintf("vllm-%d.log", i)), client: client}
		kvCfg, _ := json.Marshal(map[string]any{"enable_kv_cache_events": true, "publisher": "zmq",
			"endpoint": e.events, "topic": KVTopic})
		args := []string{"-m", "vllm.entrypoints.openai.api_server",
			"--model", c.Model, "--served-model-name", ServedName,
			"--host", "127.0.0.1", "--port", port,
			"--dtype", "float32", "--max-model-len", strconv.Itoa(c.MaxLen),
			"--block-size", strconv.Itoa(c.BlockSize), "--num-gpu-blocks-override", strconv.Itoa(c.Blocks),
			"--max-num-seqs", "32", "--enforce-eager", "--gpu-memory-utilization", "0.1",
			"--enable-prefix-caching", "--enable-prompt-tokens-details", "--generation-config", "vllm",
			"--kv-events-config", string(kvCfg)}
		e.p, err = childproc.Start(c.Python, args, childproc.Options{Dir: os.TempDir(), LogPath: e.logPath,
			ExtraEnv: engineEnv(i % max(cpus, 1)), Group: true})
		if err != nil {
			stopAll()
			return nil, err
		}
		es = append(es, e)
	}
	for _, e := range es {
		err := childproc.WaitFor(ctx, e.p, c.Startup, 500*time.Millisecond, e.name,
			func() bool { return childproc.HTTPOK(ctx, e.client, e.url+"/health") })
		if err != nil {
			stopAll()
			return nil, fmt.Errorf("%w; last log lines of %s:\n%s", err, e.logPath, childproc.Tail(e.logPath, 30))
		}
	}
	return es, nil
}

// engineEnv is what the engine's environment adds to this process's: one core
// (VLLM_CPU_OMP_THREADS_BIND), offline, and dev mode for POST /reset_prefix_cache.
func engineEnv(core int) []string {
	return []string{"VLLM_CPU_OMP_THREADS_BIND=" + strconv.Itoa(core), "OMP_NUM_THREADS=1",
		"VLLM_HOST_IP=127.0.0.1", "VLLM_NO_USAGE_STATS=1", "DO_NOT_TRACK=1", "HF_HUB_OFFLINE=1",
		"TRANSFORMERS_OFFLINE=1", "TOKENIZERS_PARALLELISM=false", "VLLM_SERVER_DEV_MODE=1"}
}

// stop stops the engine and its engine-core child. A vLLM told to stop may exit non-zero;
// that is not worth reporting once the benchmark has its numbers.
func (e *engine) stop() { _ = e.p.Stop(30 * time.Second) }

// resetPrefixCache empties the engine's prefix cache (it then publishes AllBlocksCleared).
// vLLM refuses while blocks are in use, so it retries for a while.
func (e *engine) resetPrefixCache(ctx context.Context) error {
	for try := 0; ; try++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url+"/reset_prefix_cache", nil)
		if err != nil {
			return err
		}
		resp, err := e.client.Do(req)
		if err != nil {
			return fmt.Errorf("%s: reset_prefix_cache: %w", e.name, err)
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		var out struct {
			Success *bool `json:"success"`
		}
		switch {
		case resp.StatusCode != http.StatusOK:
			return fmt.Errorf("%s: reset_prefix_cache: status %d: %s (the engine needs VLLM_SERVER_DEV_MODE=1)", e.name, resp.StatusCode, b)
		case json.Unmarshal(b, &out) != nil || out.Success == nil:
			return fmt.Errorf("%s: reset_prefix_cache: unexpected answer %s", e.name, b)
		case *out.Success:
			return nil
		case try >= 20:
			return fmt.Errorf("%s: reset_prefix_cache refused %d times (blocks still in use)", e.name, try+1)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// step makes the engine run one scheduler step, sent to it directly: a one-token completion
// of a prompt shorter than a block, so that it stores no block of its own.
func (e *engine) step(ctx context.Context) error {
	body := `{"model":"` + ServedName + `","prompt":"hi","max_tokens":1}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url+"/v1/completions", strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.client.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", e.name, err)
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: one-token completion: status %d: %s", e.name, resp.StatusCode, b)
	}
	return nil
}

// cacheCounters are an engine's prefix-cache counters, in tokens.
type cacheCounters struct {
	Queries float64 `json:"queries"`
	Hits    float64 `json:"hits"`
}

func (e *engine) counters(ctx context.Context) (cacheCounters, error) {
	m, err := promtext.Scrape(ctx, e.client, e.url+"/metrics")
	if err != nil {
		return cacheCounters{}, fmt.Errorf("%s: %w", e.name, err)
	}
	return cacheCounters{Queries: m.Sum("vllm:prefix_cache_queries_total"), Hits: m.Sum("vllm:prefix_cache_hits_total")}, nil
}
