package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/triage-gw/triage/config"
	"github.com/triage-gw/triage/upstream"
)

// stack is a running gateway with one fast and one slow mockllm replica, configured from
// docker/triage.compose.yaml with the replica URLs pointed at the test's processes.
type stack struct {
	gateway  string            // http://127.0.0.1:port
	gwProc   *proc             //
	replicas map[string]string // replica id → http://127.0.0.1:port
	pools    map[string]string // replica id → pool
}

func startStack(t *testing.T) *stack {
	t.Helper()
	triageBin, mockBin := binaries(t)
	st := &stack{replicas: map[string]string{}, pools: map[string]string{}}

	// The compose config, as the container reads it (with the image's environment).
	env := dockerfileEnv(t)
	cfg := loadConfig(t, path(composeConfigPath), envList(env))

	// The image has no mockllm binary of its own: /usr/local/bin/mockllm links to triage, which
	// runs the simulator when called by that name. The slow replica runs that way here, the
	// fast one as cmd/mockllm.
	link := filepath.Join(t.TempDir(), "mockllm")
	require.NoError(t, os.Symlink(triageBin, link))
	bins := map[string]string{"fast": mockBin, "slow": link}

	// One replica per pool, named like the compose file's first one, with the pool's preset.
	var doc map[string]any
	readYAML(t, composeConfigPath, &doc)
	pools := doc["pools"].(map[string]any)
	for pool, pc := range map[string]upstream.PoolConfig{"fast": cfg.Pools.Fast, "slow": cfg.Pools.Slow} {
		id := pc.Replicas[0].ID
		watch, addrCh := listenAddr("mockllm listening")
		p := start(t, "mockllm "+id, root, nil, watch, bins[pool],
			"--preset", pool, "--listen", "127.0.0.1:0", "--name", id)
		addr := awaitAddr(t, p, addrCh, 20*time.Second)
		st.replicas[id] = "http://" + addr
		st.pools[id] = pool
		pools[pool].(map[string]any)["replicas"] = []map[string]string{{"url": "http://" + addr, "id": id}}
	}
	out, err := yaml.Marshal(doc)
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "triage.yaml")
	require.NoError(t, os.WriteFile(file, out, 0o600))

	// The gateway as the image starts it: config path and listen address by environment.
	watch, addrCh := listenAddr("triage listening")
	st.gwProc = start(t, "triage", root,
		[]string{config.EnvConfigFile + "=" + file, "TRIAGE_SERVER_LISTEN=127.0.0.1:0"},
		watch, triageBin)
	st.gateway = "http://" + awaitAddr(t, st.gwProc, addrCh, 60*time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, poll(ctx, st.gwProc, 100*time.Millisecond, func() error {
		_, err := get(st.gateway + "/readyz")
		return err
	}), "gateway never became ready")
	return st
}

// traffic sends the requests that make the labelled series exist: a batch classify, a
// repeat (cache hit), query-process, chat completions (plain and streaming), completions.
func (st *stack) traffic(t *testing.T) {
	t.Helper()
	reqs := []struct{ path, body string }{
		{"/v1/classify", `{"texts":["Classify these animals: cat, shark, eagle","Write a poem about the sea",{"text":"Summarize this","context":"The Nile is a river in Africa."}]}`},
		{"/v1/classify", `{"text":"Write a poem about the sea"}`},
		{"/v1/query-process", `{"text":"Write a short story about a lighthouse keeper"}`},
		{"/v1/query-process", `{"text":"Is a whale a fish or a mammal? Answer with one word."}`},
		{"/v1/chat/completions", `{"model":"auto","max_tokens":4,"messages":[{"role":"user","content":"Tell me a story about a dragon"}]}`},
		{"/v1/chat/completions", `{"model":"auto","max_tokens":4,"stream":true,"messages":[{"role":"user","content":"Classify: apple, carrot, pear"}]}`},
		{"/v1/completions", `{"model":"auto","max_tokens":4,"prompt":"Summarize: the cat sat on the mat."}`},
	}
	for _, r := range reqs {
		resp, body := post(t, st.gateway+r.path, r.body)
		require.Equal(t, http.StatusOK, resp.StatusCode, "POST %s: %s", r.path, body)
		if r.path != "/v1/classify" {
			require.NotEmpty(t, resp.Header.Get("x-router-latency"), "POST %s", r.path)
		}
	}
}

// TestGatewayStack runs the real gateway and mockllm, then checks the dashboard against
// their /metrics and lets a real Prometheus scrape them.
func TestGatewayStack(t *testing.T) {
	st := startStack(t)
	st.traffic(t)
	d := readDashboard(t)

	t.Run("dashboard queries only exported metrics", func(t *testing.T) {
		body, err := get(st.gateway + "/metrics")
		require.NoError(t, err)
		gw := parseExposition(body)
		var replica exposition
		for _, u := range st.replicas {
			body, err := get(u + "/metrics")
			require.NoError(t, err)
			replica = parseExposition(body)
			break // every mockllm exports the same names
		}
		for _, q := range d.queries() {
			names, err := metricNames(q.expr)
			require.NoError(t, err, q.where)
			for _, n := range names {
				switch {
				case strings.HasPrefix(n, "triage_"):
					require.NoError(t, gw.check(n), "%s: %s (gateway /metrics)", q.where, q.expr)
				case strings.HasPrefix(n, "vllm:"), strings.HasPrefix(n, "mockllm_"):
					require.NoError(t, replica.check(n), "%s: %s (model server /metrics)", q.where, q.expr)
				case n == "up":
					// Prometheus' own per-target series.
				default:
					t.Errorf("%s: %s: metric %s is neither the gateway's (triage_*) nor a model server's (vllm:*)", q.where, q.expr, n)
				}
			}
		}
	})

	t.Run("prometheus scrapes the gateway", func(t *testing.T) {
		prom := startPrometheus(t, st)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()

		// The key series, and the replica labels that join the gateway's view of a
		// replica with the replica's own.
		key := []string{
			`up{job="triage"} == 1`,
			`triage_requests_total{endpoint="chat_completions",code="200"}`,
			`triage_decisions_total`,
			`triage_router_latency_seconds_bucket`,
			`triage_batcher_batch_size_bucket`,
			`triage_cache_requests_total{result="hit"}`,
			`triage_slow_load`,
			`triage_decision_threshold`,
			`triage_upstream_inflight`,
			`triage_upstream_tokens_total{kind="completion"} > 0`,
			`triage_upstream_cost_total{pool="slow"}`,
			`triage_upstream_cost_baseline_total{pool="fast"}`,
		}
		for id, pool := range st.pools {
			key = append(key,
				fmt.Sprintf(`up{job="mockllm",replica=%q} == 1`, id),
				fmt.Sprintf(`vllm:num_requests_running{pool=%q,replica=%q}`, pool, id),
				fmt.Sprintf(`vllm:time_to_first_token_seconds_bucket{replica=%q}`, id),
				// The replica-view panels read the server's gauges through the gateway.
				fmt.Sprintf(`triage_upstream_scraped_running_requests{pool=%q,replica=%q}`, pool, id),
				fmt.Sprintf(`triage_upstream_scraped_kv_cache_usage_ratio{pool=%q,replica=%q}`, pool, id),
				fmt.Sprintf(`triage_upstream_inflight{pool=%q,replica=%q}`, pool, id))
		}
		require.NoError(t, poll(ctx, prom.proc, 500*time.Millisecond, func() error {
			for _, q := range key {
				res, err := prom.query(q)
				if err != nil {
					return err
				}
				if len(res) == 0 {
					return fmt.Errorf("no series for %s yet", q)
				}
			}
			return nil
		}), "Prometheus never had the key series")

		// Every metric the dashboard names is in Prometheus, and every expression evaluates.
		var names []string
		body, err := get(prom.url + "/api/v1/label/__name__/values")
		require.NoError(t, err)
		var lv struct {
			Status string   `json:"status"`
			Data   []string `json:"data"`
		}
		require.NoError(t, json.Unmarshal([]byte(body), &lv))
		for _, q := range d.queries() {
			ns, err := metricNames(q.expr)
			require.NoError(t, err)
			names = append(names, ns...)
			expr, err := expandGrafana(q.expr)
			require.NoError(t, err)
			_, err = prom.query(expr)
			require.NoError(t, err, "%s: Prometheus refused %s", q.where, expr)
		}
		for _, n := range names {
			require.True(t, slices.Contains(lv.Data, n), "Prometheus has no series named %s", n)
		}
	})
}

// prometheus is a running Prometheus server.
type prometheus struct {
	url  string
	proc *proc
}

// promConfigFor rewrites docker/prometheus/prometheus.yml for the test: the same jobs,
// labels and paths, targets at the test's 127.0.0.1 addresses, 1 s scrapes. A job the test
// does not know fails, so the file and the test stay in step.
func promConfigFor(t *testing.T, st *stack, self string) []byte {
	t.Helper()
	pc := readPromConfig(t)
	if pc.Global == nil {
		pc.Global = map[string]any{}
	}
	pc.Global["scrape_interval"] = "1s"
	pc.Global["scrape_timeout"] = "1s"
	pc.Global["evaluation_interval"] = "1s"
	host := func(u string) string {
		p, err := url.Parse(u)
		require.NoError(t, err)
		return p.Host
	}
	for i, sc := range pc.ScrapeConfigs {
		switch sc.JobName {
		case "triage":
			require.Len(t, sc.StaticConfigs, 1)
			sc.StaticConfigs[0].Targets = []string{host(st.gateway)}
		case "mockllm":
			var out []staticConfig
			for _, s := range sc.StaticConfigs {
				if u, ok := st.replicas[s.Labels["replica"]]; ok {
					s.Targets = []string{host(u)}
					out = append(out, s)
				}
			}
			require.Len(t, out, len(st.replicas), "the mockllm job must list every replica id of the gateway config")
			sc.StaticConfigs = out
		case "prometheus":
			sc.StaticConfigs = []staticConfig{{Targets: []string{self}}}
		default:
			t.Fatalf("%s: job %q is unknown to the test; teach promConfigFor where it points", prometheusPath, sc.JobName)
		}
		pc.ScrapeConfigs[i] = sc
	}
	out, err := yaml.Marshal(pc)
	require.NoError(t, err)
	return out
}

func startPrometheus(t *testing.T, st *stack) *prometheus {
	t.Helper()
	bin := tool(t, "prometheus")
	dir := t.TempDir()
	var last *proc
	for attempt := 0; attempt < 3; attempt++ { // the port may be taken between probe and bind
		addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
		file := filepath.Join(dir, fmt.Sprintf("prometheus-%d.yml", attempt))
		require.NoError(t, os.WriteFile(file, promConfigFor(t, st, addr), 0o600))
		promtoolCheck(t, file)
		p := start(t, "prometheus", dir, nil, nil, bin,
			"--config.file="+file,
			"--storage.tsdb.path="+filepath.Join(dir, fmt.Sprintf("data-%d", attempt)),
			"--web.listen-address="+addr,
			"--log.level=warn")
		last = p
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := poll(ctx, p, 100*time.Millisecond, func() error {
			_, err := get("http://" + addr + "/-/ready")
			return err
		})
		cancel()
		if err == nil {
			return &prometheus{url: "http://" + addr, proc: p}
		}
		select {
		case <-p.done:
			if strings.Contains(p.out.String(), "address already in use") {
				continue
			}
		default:
		}
		t.Fatalf("Prometheus did not become ready: %v", err)
	}
	t.Fatalf("Prometheus could not bind a port:\n%s", last.out.String())
	return nil
}

// query runs an instant query and returns its vector result; a refused query is an error.
func (p *prometheus) query(expr string) ([]json.RawMessage, error) {
	body, err := get(p.url + "/api/v1/query?query=" + url.QueryEscape(expr))
	if err != nil {
		return nil, err
	}
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string          `json:"resultType"`
			Result     json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		return nil, err
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("query %s: %s", expr, r.Error)
	}
	if r.Data.ResultType != "vector" {
		return []json.RawMessage{r.Data.Result}, nil // scalar or string
	}
	var vec []json.RawMessage
	if err := json.Unmarshal(r.Data.Result, &vec); err != nil {
		return nil, err
	}
	return vec, nil
}
