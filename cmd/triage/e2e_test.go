package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/classifier"
	"github.com/triage-gw/triage/config"
	"github.com/triage-gw/triage/internal/redistest"
	"github.com/triage-gw/triage/router"
	"github.com/triage-gw/triage/sim"
	"github.com/triage-gw/triage/upstream"
	"github.com/triage-gw/triage/upstream/policy"
)

// startGateway wires cfg exactly as serve does (built-in pools when none are configured, the
// real classifier from the repository's models/ and .deps/) and runs it on 127.0.0.1:0.
func startGateway(t *testing.T, cfg config.Config) (string, *router.Router) {
	t.Helper()
	cc := testClassifierConfig(cfg.Classifier)
	return startGatewayWith(t, cfg, func() (router.Model, error) { return loadClassifier(cc) })
}

// testClassifierConfig resolves cfg's relative paths from the repository root, as the
// defaults are.
func testClassifierConfig(cfg classifier.Config) classifier.Config {
	for _, p := range []*string{&cfg.ModelDir, &cfg.EncoderDir, &cfg.ORTLibrary} {
		if !filepath.IsAbs(*p) {
			*p = filepath.Join("..", "..", *p)
		}
	}
	return cfg
}

// startGatewayWith is startGateway with the model from load.
func startGatewayWith(t *testing.T, cfg config.Config, load router.Loader) (string, *router.Router) {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	p := parts{log: log, load: load}
	if cfg.Sim.Enabled {
		locals, err := listenBuiltin(&cfg, log)
		require.NoError(t, err)
		for _, l := range locals {
			p.backends = append(p.backends, l)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p.listener = ln
	gw, err := build(cfg, p)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gw.stages.run(ctx, log) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(30 * time.Second):
			t.Error("the gateway did not stop")
		}
	})
	return "http://" + ln.Addr().String(), gw.router
}

// quickSims makes the built-in replicas answer at once.
func quickSims(cfg *config.Config) {
	cfg.Sim.Enabled = true
	cfg.Sim.Fast.TTFTBase, cfg.Sim.Fast.PrefillPerToken, cfg.Sim.Fast.DecodePerToken, cfg.Sim.Fast.Jitter = 0, 0, 0, 0
	cfg.Sim.Slow.TTFTBase, cfg.Sim.Slow.PrefillPerToken, cfg.Sim.Slow.DecodePerToken, cfg.Sim.Slow.Jitter = 0, 0, 0, 0
}

func post(t *testing.T, url, body string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, b
}

func TestBuiltinPoolsServeEndToEnd(t *testing.T) {
	cfg := config.DefaultConfig()
	cfg.Sim.FastReplicas, cfg.Sim.SlowReplicas = 1, 2
	quickSims(&cfg)
	url, _ := startGateway(t, cfg)

	resp, body := post(t, url+"/v1/query-process", `{"text":"Write a short story about a dragon who learns to bake bread."}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Equal(t, `{"label":"1"}`, string(body))
	require.Contains(t, resp.Header.Get("x-router-replica"), "mockllm-slow-")

	resp, body = post(t, url+"/v1/chat/completions",
		`{"stream":true,"max_tokens":3,"messages":[{"role":"user","content":"Classify these animals: cat, shark, eagle"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Equal(t, "fast", resp.Header.Get("x-router-path"))
	require.Equal(t, "mockllm-fast-0", resp.Header.Get("x-router-replica"))
	require.Equal(t, 3, strings.Count(string(body), `"chat.completion.chunk"`))
	require.True(t, strings.HasSuffix(string(body), "data: [DONE]\n\n"))

	resp, body = post(t, url+"/v1/chat/completions", `{"model":"auto","messages":[{"role":"user","content":"Tell me a story"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	var out struct{ Model string }
	require.NoError(t, json.Unmarshal(body, &out))
	require.Equal(t, "mock-"+resp.Header.Get("x-router-path"), out.Model, "the built-in pools' model names are filled in")
	require.Equal(t, "true", resp.Header.Get("x-simulated"), "a made-up answer says so")

	resp, body = get(t, url+"/readyz")
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Contains(t, string(body), `"simulated":true`)
	require.Contains(t, string(body), "every answer is made up")
}

func get(t *testing.T, url string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, b
}

type parityRow struct {
	Category    string  `json:"category"`
	Instruction string  `json:"instruction"`
	Context     string  `json:"context"`
	PSlow       float64 `json:"p_slow"`   // the encoder's
	PStatic     float64 `json:"p_static"` // the cascade's first stage
}

// TestRealModelEndToEnd sends Dolly parity texts through real HTTP to the real classifier
// with the cascade on (the default): a text whose first-stage P(slow) is outside the model's
// band is decided by the first stage, every other by the encoder, and the P(slow) the
// gateway reports matches the notebook's for that stage to 1e-4. /v1/query-process routes a
// story to the slow pool and a summarisation with its document to the fast one.
// manifestBand reads the shipped model's first-stage band.
func manifestBand(t *testing.T) [2]float64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "models", "manifest.json"))
	require.NoError(t, err)
	var m struct {
		Static struct {
			Band [2]float64 `json:"band"`
		} `json:"static"`
	}
	require.NoError(t, json.Unmarshal(b, &m))
	require.Less(t, m.Static.Band[0], m.Static.Band[1])
	return m.Static.Band
}

func TestRealModelEndToEnd(t *testing.T) {
	cfg := config.DefaultConfig()
	quickSims(&cfg)
	// This test checks values, not overload: 50-text requests on a busy CI machine could
	// exceed the expected-wait bound and get 429.
	cfg.Batcher.MaxQueueDelay = 0
	url, _ := startGateway(t, cfg)

	f, err := os.Open(filepath.Join("..", "..", "models", "parity.jsonl"))
	require.NoError(t, err)
	defer f.Close()
	var rows []parityRow
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var r parityRow
		require.NoError(t, json.Unmarshal(sc.Bytes(), &r))
		// Texts whitespace normalisation changes are covered by the classifier's own test.
		// Those longer than server.max_text_bytes (16 KiB) stay: the gateway classifies
		// their first 16 KiB, which must give the whole text's P(slow).
		if r.Category == "edge" ||
			strings.Join(strings.Fields(r.Instruction), " ") != strings.TrimSpace(r.Instruction) ||
			strings.Join(strings.Fields(r.Context), " ") != strings.TrimSpace(r.Context) {
			continue
		}
		rows = append(rows, r)
	}
	require.GreaterOrEqual(t, len(rows), 100)
	band := manifestBand(t)
	stages := map[string]int{}
	defer func() {
		t.Logf("stages: %v", stages)
		require.Positive(t, stages["static"], "the first stage decides some texts")
		require.Positive(t, stages["encoder"], "and defers others")
	}()

	for lo := 0; lo < len(rows); lo += 50 {
		hi := min(lo+50, len(rows))
		items := make([]map[string]string, 0, hi-lo)
		for _, r := range rows[lo:hi] {
			items = append(items, map[string]string{"text": r.Instruction, "context": r.Context})
		}
		body, _ := json.Marshal(map[string]any{"texts": items})
		resp, b := post(t, url+"/v1/classify", string(body))
		require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
		var out struct {
			Results []struct {
				PSlow float64 `json:"p_slow"`
				Stage string  `json:"stage"`
			} `json:"results"`
		}
		require.NoError(t, json.NewDecoder(bytes.NewReader(b)).Decode(&out))
		require.Len(t, out.Results, hi-lo)
		for i, got := range out.Results {
			want := rows[lo+i]
			wantStage, wantP := "encoder", want.PSlow
			if want.PStatic < band[0] || want.PStatic > band[1] {
				wantStage, wantP = "static", want.PStatic
			}
			stages[got.Stage]++
			require.Equal(t, wantStage, got.Stage, "row %d (%s): first-stage P %.4f, band %v", lo+i, want.Category, want.PStatic, band)
			require.LessOrEqualf(t, math.Abs(got.PSlow-wantP), 1e-4+5e-7, // the API rounds to 6 decimals
				"row %d (%s, %s): gateway %.6f, notebook %.6f", lo+i, want.Category, got.Stage, got.PSlow, wantP)
		}
	}

	for _, tc := range []struct {
		body, label, path string
	}{
		{`{"text":"Write a short story about a dragon who learns to bake bread."}`, "1", "slow"},
		{`{"text":"Summarize this passage in two sentences.","context":"The Nile is a major north-flowing river in northeastern Africa. It flows into the Mediterranean Sea."}`, "0", "fast"},
	} {
		resp, b := post(t, url+"/v1/query-process", tc.body)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
		require.JSONEq(t, fmt.Sprintf(`{"label":%q}`, tc.label), string(b))
		require.Equal(t, tc.path, resp.Header.Get("x-router-path"))
		require.NotEmpty(t, resp.Header.Get("x-router-latency"))
		require.True(t, strings.HasPrefix(resp.Header.Get("x-router-replica"), "mockllm-"+tc.path+"-"))
	}
}

// The label boundary has one source: the manifest's label_threshold. With a copy of the
// shipped model whose manifest says 0.6 (and decision.base set to match), a text the model
// scores about 0.58 is fast everywhere — query-process's label, /v1/classify's model label
// and label on a miss and on a hit, and the decision's reason — and a story is slow
// everywhere.
func TestManifestLabelThresholdIsTheOnlyBoundary(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join("..", "..", "models")
	entries, err := os.ReadDir(src)
	require.NoError(t, err)
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		require.NoError(t, err)
		if e.Name() == "manifest.json" {
			var m map[string]any
			require.NoError(t, json.Unmarshal(b, &m))
			require.Equal(t, 0.5, m["label_threshold"])
			m["label_threshold"] = 0.6
			b, err = json.Marshal(m)
			require.NoError(t, err)
		}
		require.NoError(t, os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644))
	}
	cfg := config.DefaultConfig()
	quickSims(&cfg)
	cfg.Classifier.ModelDir = dir // t.TempDir is absolute
	cfg.Decision.Base, cfg.Decision.Alpha = 0.6, 0.35
	cfg.Cascade.Enabled = false // the encoder's P(slow) for these texts is known (parity file)
	url, rt := startGateway(t, cfg)

	for _, tc := range []struct {
		text        string
		pLo, pHi    float64
		label, path string
		reason      string
	}{
		// 0.579 in the notebook's parity file: slow for a 0.5 boundary, fast for 0.6.
		{"Why are there so many different types of cheeses in France?", 0.5, 0.6, "0", "fast", "fast_model"},
		{"Write a short story about a dragon who learns to bake bread.", 0.9, 1, "1", "slow", "slow_granted"},
	} {
		for _, cache := range []string{"miss", "hit"} {
			resp, b := post(t, url+"/v1/classify", fmt.Sprintf(`{"text":%q}`, tc.text))
			require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
			var out struct {
				Results []struct {
					PSlow      float64 `json:"p_slow"`
					ModelLabel int     `json:"model_label"`
					Label      int     `json:"label"`
					Reason     string  `json:"reason"`
					Cache      string  `json:"cache"`
				} `json:"results"`
			}
			require.NoError(t, json.Unmarshal(b, &out))
			r := out.Results[0]
			require.Equal(t, cache, r.Cache)
			require.Greater(t, r.PSlow, tc.pLo, tc.text)
			require.Less(t, r.PSlow, tc.pHi, tc.text)
			require.Equal(t, tc.label, fmt.Sprint(r.ModelLabel), "%s, %s", tc.text, cache)
			require.Equal(t, tc.label, fmt.Sprint(r.Label), "%s, %s", tc.text, cache)
			require.Equal(t, tc.reason, r.Reason, "%s, %s", tc.text, cache)
			rt.WaitCache()
		}
		resp, b := post(t, url+"/v1/query-process", fmt.Sprintf(`{"text":%q}`, tc.text))
		require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
		require.JSONEq(t, fmt.Sprintf(`{"label":%q}`, tc.label), string(b))
		require.Equal(t, tc.path, resp.Header.Get("x-router-path"))
		require.Equal(t, tc.reason, resp.Header.Get("x-router-reason"))
		require.Equal(t, "hit", resp.Header.Get("x-router-cache"))
	}
}

// Two gateways in fleet mode over one Redis: a text classified by one is a shared-tier hit
// on the other, and both report the fleet up and the same live gateways.
func TestFleetOfTwoGatewaysSharesTheCache(t *testing.T) {
	r := redistest.Start(t)
	cfg := config.DefaultConfig()
	quickSims(&cfg)
	cfg.Fleet.Enabled = true
	cfg.Fleet.URL = r.URL()
	cfg.Fleet.Slots.SyncInterval = 20 * time.Millisecond
	cfg.Fleet.Slots.LeaseTTL = time.Second
	cfg.Fleet.GatewayID = "gw-a"
	a, _ := startGateway(t, cfg)
	cfg.Fleet.GatewayID = "gw-b"
	b, _ := startGateway(t, cfg)

	const text = "Write a limerick about a lighthouse keeper."
	resp, body := post(t, a+"/v1/query-process", fmt.Sprintf(`{"text":%q}`, text))
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Equal(t, "miss", resp.Header.Get("x-router-cache"))

	// Writes to the shared tier are asynchronous: wait for the entry before asking b.
	require.Eventually(t, func() bool {
		keys, err := r.Command("KEYS", "triage:c:*")
		return err == nil && keys != "" && !strings.HasPrefix(keys, "*0")
	}, 5*time.Second, 5*time.Millisecond)
	resp, body = post(t, b+"/v1/classify", fmt.Sprintf(`{"text":%q}`, text))
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Contains(t, string(body), `"cache_tier":"shared"`, "gateway b finds gateway a's result in the shared tier")
	resp, _ = post(t, b+"/v1/query-process", fmt.Sprintf(`{"text":%q}`, text))
	require.Equal(t, "hit", resp.Header.Get("x-router-cache"), "and then in its own")

	for _, gw := range []string{a, b} {
		require.Eventually(t, func() bool {
			m := metricsText(t, gw)
			return strings.Contains(m, "triage_fleet_up 1") && strings.Contains(m, "triage_fleet_gateways 2")
		}, 5*time.Second, 10*time.Millisecond)
	}
}

func metricsText(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

// Two gateways in fleet mode in front of the same replicas: a conversation's turns sent to
// alternate gateways stay on one replica (lmetric-sticky, with shared session bindings), and
// each gateway counts the other as a live peer.
func TestFleetOfTwoGatewaysKeepsConversationsOnTheirReplica(t *testing.T) {
	r := redistest.Start(t)
	cfg := config.DefaultConfig()
	quickSims(&cfg)
	cfg.Sim.Enabled = false // the replicas below are started here, shared by both gateways
	// One set of replicas for both gateways (built-in pools would give each its own).
	for _, p := range []struct {
		pool *upstream.PoolConfig
		sim  sim.Config
		n    int
	}{{&cfg.Pools.Fast, cfg.Sim.Fast, 4}, {&cfg.Pools.Slow, cfg.Sim.Slow, 2}} {
		l, err := sim.ListenLocal(p.sim, p.n, slog.New(slog.DiscardHandler))
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { l.Run(ctx); close(done) }()
		t.Cleanup(func() { cancel(); <-done })
		ids, urls := l.Replicas()
		for i := range ids {
			p.pool.Replicas = append(p.pool.Replicas, upstream.ReplicaConfig{URL: urls[i], ID: ids[i]})
		}
		p.pool.Policy.Name = "lmetric"
		lm := policy.SectionOf[policy.LMetricConfig](p.pool.Policy, "lmetric")
		lm.Variant = policy.LMetricSticky
		require.NoError(t, p.pool.Policy.SetSection("lmetric", lm))
	}
	cfg.Fleet.Enabled = true
	cfg.Fleet.URL = r.URL()
	cfg.Fleet.GatewayID = "gw-a"
	a, _ := startGateway(t, cfg)
	cfg.Fleet.GatewayID = "gw-b"
	b, _ := startGateway(t, cfg)
	for _, gw := range []string{a, b} {
		require.Eventually(t, func() bool {
			m := metricsText(t, gw)
			return strings.Contains(m, "triage_fleet_affinity_subscribed 1") && strings.Contains(m, "triage_fleet_affinity_peers 1")
		}, 5*time.Second, 10*time.Millisecond)
	}

	chat := func(gw, session string, turn int) string {
		// Each conversation has its own system prompt and a growing history; the last user
		// message, the one classified, stays a fast one.
		const ask = `{"role":"user","content":"Classify these animals: cat, shark, eagle"}`
		msgs := fmt.Sprintf(`{"role":"system","content":"You are the zoo's assistant for %s. %s"},%s`,
			session, strings.Repeat("Keep answers short. ", 8), ask)
		for i := range turn {
			msgs += fmt.Sprintf(`,{"role":"assistant","content":"answer %d"},%s`, i, ask)
		}
		req, err := http.NewRequest(http.MethodPost, gw+"/v1/chat/completions",
			strings.NewReader(`{"max_tokens":2,"messages":[`+msgs+`]}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("x-session-id", session)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		return resp.Header.Get("x-router-path") + "/" + resp.Header.Get("x-router-replica")
	}
	const sessions = 6
	first := make([]string, sessions)
	for s := range sessions {
		first[s] = chat(a, fmt.Sprint("conv-", s), 0)
	}
	require.Eventually(t, func() bool {
		return strings.Contains(metricsText(t, b), fmt.Sprintf(`triage_fleet_affinity_picks_received_total{result="applied"} %d`, sessions))
	}, 5*time.Second, 10*time.Millisecond)
	for s := sessions - 1; s >= 0; s-- { // reverse order: b's own tie-breaks would differ
		for turn := 1; turn <= 2; turn++ {
			gw := []string{b, a}[turn%2]
			require.Equal(t, first[s], chat(gw, fmt.Sprint("conv-", s), turn), "session %d, turn %d", s, turn)
		}
	}
}

// TestPastedDocumentClassifiedByItsInstruction: with the shipped model, a summarization
// request whose article is pasted into the message (either side of the instruction, a blank
// line between) is classified as the instruction with the article as its context, so it goes
// to the fast pool as the same request with a separate context does; with
// server.split_pasted off the whole message is the instruction, and the model reads it as a
// long request (slow).
func TestPastedDocumentClassifiedByItsInstruction(t *testing.T) {
	const (
		// A row of Dolly's summarization test split.
		instruction = "Summarize Roosevelt's accomplishments described in this paragraph."
		article     = "Beginning in 1925, Roosevelt spent most of his time in the Southern United States, at " +
			"first on his houseboat, the Larooco. Intrigued by the potential benefits of hydrotherapy, he " +
			"established a rehabilitation center at Warm Springs, Georgia, in 1926. To create the rehabilitation " +
			"center, he assembled a staff of physical therapists and used most of his inheritance to purchase " +
			"the Merriweather Inn. In 1938, he founded the National Foundation for Infantile Paralysis, leading " +
			"to the development of polio vaccines."
	)
	cfg := config.DefaultConfig()
	quickSims(&cfg)
	// The coding request below falls in the first stage's band (P(slow) 0.75 from MiniLM).
	// On a busy machine (CI's race build, packages tested side by side) the encoder can
	// outlast the 50 ms classify budget, and the in-band head then decides it, fast: CI saw
	// that once. The rule under test is the split, not the budget, so MiniLM always answers.
	cfg.Routing.ClassifyBudget = 0
	cfg.Cascade.NarrowTo = 0
	on, _ := startGateway(t, cfg)
	cfg.Server.SplitPasted = false
	off, _ := startGateway(t, cfg)

	for _, text := range []string{instruction + "\n\n" + article, article + "\n\n" + instruction,
		instruction + "\n" + article, article + "\n" + instruction} {
		body, _ := json.Marshal(map[string]any{"model": "auto", "max_tokens": 4,
			"messages": []map[string]string{{"role": "user", "content": text}}})
		resp, b := post(t, on+"/v1/chat/completions", string(body))
		require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
		require.Equal(t, "fast", resp.Header.Get("x-router-path"), "%.40q", text)
		resp, b = post(t, off+"/v1/chat/completions", string(body))
		require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
		require.Equal(t, "slow", resp.Header.Get("x-router-path"), "%.40q with split_pasted off", text)
	}
	// Code is not a document: pasted after its request, it is read whole (with the split it
	// would be a context, and the model answers fast for any context).
	code := "Review this code for concurrency bugs.\n\n" + `func (c *Cache) Get(key string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.items[key]
	if !ok || time.Now().After(e.expires) {
		delete(c.items, key)
		return "", false
	}
	c.hits++
	return e.value, true
}

func (c *Cache) Set(key, value string, ttl time.Duration) {
	c.mu.Lock()
	c.items[key] = entry{value: value, expires: time.Now().Add(ttl)}
	c.mu.Unlock()
}`
	body, _ := json.Marshal(map[string]any{"model": "auto", "max_tokens": 4,
		"messages": []map[string]string{{"role": "user", "content": code}}})
	resp, b := post(t, on+"/v1/chat/completions", string(body))
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	require.Equal(t, "slow", resp.Header.Get("x-router-path"), "a coding request with its code: stage %s, P(slow) %s, in band %q",
		resp.Header.Get("x-router-stage"), resp.Header.Get("x-router-p-slow"), resp.Header.Get("x-router-in-band"))
	require.Equal(t, "encoder", resp.Header.Get("x-router-stage"))
	require.Contains(t, metricsText(t, on), "triage_pasted_documents_total 4\n")
	require.Contains(t, metricsText(t, off), "triage_pasted_documents_total 0\n")
	// The same request with the article as a context of its own, for reference.
	resp, b = post(t, off+"/v1/classify", fmt.Sprintf(`{"text":%q,"context":%q}`, instruction, article))
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	require.Contains(t, string(b), `"model_label":0`)
}
