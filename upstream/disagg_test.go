package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/sim"
	"github.com/triage-gw/triage/upstream/policy"
)

// exchange is one request a replica received and what it answered so far.
type exchange struct {
	body   []byte
	answer bytes.Buffer
}

// recorder serves a sim replica and keeps every exchange. Answers are
// captured as they are written, so a finished read of one has all of it.
type recorder struct {
	h  http.Handler
	mu sync.Mutex
	ex []*exchange
}

func (rc *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(b))
	e := &exchange{body: b}
	if r.URL.Path != "/metrics" && r.URL.Path != "/health" {
		rc.mu.Lock()
		rc.ex = append(rc.ex, e)
		rc.mu.Unlock()
	}
	rc.h.ServeHTTP(&captureWriter{ResponseWriter: w, rc: rc, e: e}, r)
}

// exchanges returns the request bodies and answers received so far.
func (rc *recorder) exchanges() (bodies, answers [][]byte) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, e := range rc.ex {
		bodies = append(bodies, e.body)
		answers = append(answers, bytes.Clone(e.answer.Bytes()))
	}
	return bodies, answers
}

type captureWriter struct {
	http.ResponseWriter
	rc *recorder
	e  *exchange
}

func (w *captureWriter) Write(p []byte) (int, error) {
	w.rc.mu.Lock()
	w.e.answer.Write(p)
	w.rc.mu.Unlock()
	return w.ResponseWriter.Write(p)
}

func (w *captureWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// pdReplica starts a sim replica with role (sim's), recorded, on 127.0.0.1.
func pdReplica(t *testing.T, name, role string, mutate func(*sim.Config)) (*recorder, string) {
	t.Helper()
	c := sim.FastPreset()
	c.Name, c.Model, c.Role = name, "m", role
	c.TTFTBase, c.PrefillPerToken, c.DecodePerToken, c.Jitter = 0, 0, 0, 0
	if mutate != nil {
		mutate(&c)
	}
	s, err := sim.New(c, sim.Options{})
	require.NoError(t, err)
	rc := &recorder{h: s}
	hs := httptest.NewServer(rc)
	t.Cleanup(hs.Close)
	return rc, hs.URL
}

// pdConfig is a pool of the given replicas, each with its gateway role.
func pdConfig(replicas ...ReplicaConfig) PoolConfig {
	cfg := testConfig()
	cfg.Replicas = replicas
	cfg.Disaggregation.LegDeadline = Duration(2 * time.Second)
	cfg.Disaggregation.KVLease = Duration(5 * time.Second)
	return cfg
}

const pdTestPrompt = "Write a limerick about a prefill replica that handed its blocks to a decoder."

// pdBodies are a completion and a chat request for pdTestPrompt, the text the
// sim answers them from (a chat's prompt is its rendered messages).
func pdBody(path string, stream bool, extra string) (body, prompt string) {
	s := strconv.FormatBool(stream)
	if path == "/v1/completions" {
		return `{"model":"client","prompt":` + strconv.Quote(pdTestPrompt) + `,"max_tokens":6,"stream":` + s + extra + `}`, pdTestPrompt
	}
	msgs := []sim.Message{{Role: "user", Content: pdTestPrompt}}
	return `{"model":"client","messages":[{"role":"user","content":` + strconv.Quote(pdTestPrompt) + `}],"max_completion_tokens":6,"stream":` + s + extra + `}`,
		sim.RenderChat(msgs)
}

// answerText reads a completion or chat answer, streamed or not, and returns
// its text.
func answerText(t *testing.T, b []byte, stream bool) string {
	t.Helper()
	type choice struct {
		Text    string `json:"text"`
		Message struct {
			Content string `json:"content"`
		} `json:"message"`
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
	}
	var out strings.Builder
	add := func(js string) {
		var v struct {
			Choices []choice `json:"choices"`
		}
		require.NoError(t, json.Unmarshal([]byte(js), &v), js)
		for _, c := range v.Choices {
			out.WriteString(c.Text + c.Message.Content + c.Delta.Content)
		}
	}
	if !stream {
		add(string(b))
		return out.String()
	}
	done := false
	for line := range strings.SplitSeq(string(b), "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		switch {
		case !ok:
		case data == "[DONE]":
			done = true
		default:
			add(data)
		}
	}
	require.True(t, done, "stream without [DONE]: %s", b)
	return out.String()
}

func jsonMembers(t *testing.T, body []byte) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(body, &m), string(body))
	return m
}

func doPD(t *testing.T, f *poolFixture, path, body string) (*Response, []byte) {
	t.Helper()
	return doPDRouted(t, f, path, body, "")
}

// doPDRouted is doPD with prompt as the routing prompt (what prefix policies hash).
func doPDRouted(t *testing.T, f *poolFixture, path, body, prompt string) (*Response, []byte) {
	t.Helper()
	resp, err := f.pool.Do(context.Background(), &ForwardRequest{Method: http.MethodPost, Path: path, Body: []byte(body),
		SetModel: true, Routing: policy.Request{Prompt: prompt}})
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, b
}

// Through the hand-off: the prefill leg is non-streaming with max_tokens 1 and
// asks for a remote decode; the decode leg is the client's request with the
// prefill's kv_transfer_params byte for byte, and its answer is what one
// engine would have said.
func TestDisaggregatedRequestRunsInTwoLegs(t *testing.T) {
	for _, path := range []string{"/v1/completions", "/v1/chat/completions"} {
		for _, stream := range []bool{false, true} {
			t.Run(path+" stream="+strconv.FormatBool(stream), func(t *testing.T) {
				pre, pu := pdReplica(t, "p", sim.RolePrefill, nil)
				dec, du := pdReplica(t, "d", sim.RoleDecode, nil)
				f := newFixture(t, pdConfig(ReplicaConfig{URL: pu, ID: "p0", Role: RolePrefill}, ReplicaConfig{URL: du, ID: "d0", Role: RoleDecode}), nil, nil)
				extra := ""
				if stream {
					extra = `,"stream_options":{"include_usage":true}`
				}
				// A client's own kv_transfer_params never reach a replica.
				extra += `,"kv_transfer_params":{"do_remote_prefill":true,"remote_host":"10.0.0.1"}`
				body, prompt := pdBody(path, stream, extra)
				resp, b := doPD(t, f, path, body)

				require.Equal(t, 200, resp.Status, string(b))
				require.Equal(t, "d0", resp.ReplicaID)
				require.NotNil(t, resp.Prefill)
				require.Equal(t, "p0", resp.Prefill.ReplicaID)
				require.Positive(t, resp.Prefill.Duration)
				require.Empty(t, resp.Fallback)
				require.Equal(t, sim.GeneratedText(prompt, 6), answerText(t, b, stream))
				require.Equal(t, strconv.Itoa(sim.CountTokens(prompt)), resp.Header.Get(sim.HeaderKVTransferTokens),
					"the decode replica fetched the whole prompt's KV")

				pb, pa := pre.exchanges()
				require.Len(t, pb, 1)
				pm := jsonMembers(t, pb[0])
				require.JSONEq(t, "false", string(pm["stream"]))
				require.JSONEq(t, "1", string(pm["max_tokens"]))
				if path == "/v1/chat/completions" {
					require.JSONEq(t, "1", string(pm["max_completion_tokens"]))
				}
				require.NotContains(t, pm, "stream_options")
				require.JSONEq(t, string(prefillRequestParams), string(pm[kvTransferKey]))
				require.JSONEq(t, `"pool-model"`, string(pm["model"]), "each leg names the replica's model")

				db, _ := dec.exchanges()
				require.Len(t, db, 1)
				dm := jsonMembers(t, db[0])
				returned, ok := kvParams(pa[0])
				require.True(t, ok, string(pa[0]))
				require.Equal(t, string(returned), string(dm[kvTransferKey]), "the decode leg carries the prefill's params unchanged")
				require.JSONEq(t, strconv.FormatBool(stream), string(dm["stream"]))
				if stream {
					require.Contains(t, dm, "stream_options")
				}

				require.Equal(t, 1.0, f.metric(t, "triage_upstream_pd_legs_total", map[string]string{"pool": "test", "leg": "prefill", "outcome": "ok"}))
				require.Equal(t, 1.0, f.metric(t, "triage_upstream_pd_legs_total", map[string]string{"pool": "test", "leg": "decode", "outcome": "ok"}))
				require.Equal(t, 1.0, f.metric(t, "triage_upstream_pd_leg_seconds", map[string]string{"pool": "test", "leg": "prefill"}))
				require.Zero(t, f.pool.InFlight())
			})
		}
	}
}

// Every failure before the decode leg has started runs the request whole on a
// decode replica, without params, and counts why; no decode replica ever sees
// the same params twice.
func TestDisaggregatedFallbacks(t *testing.T) {
	for _, tc := range []struct {
		name   string
		reason FallbackReason
		// replicas builds the pool and returns the replicas that decode or run whole.
		replicas func(t *testing.T) ([]ReplicaConfig, []*recorder)
		deadline time.Duration
	}{
		{"prefill 500", FallbackPrefillError, func(t *testing.T) ([]ReplicaConfig, []*recorder) {
			_, pu := pdReplica(t, "p", sim.RolePrefill, func(c *sim.Config) { c.ErrorRate = 1 })
			dec, du := pdReplica(t, "d", sim.RoleDecode, nil)
			return []ReplicaConfig{{URL: pu, ID: "p0", Role: RolePrefill}, {URL: du, ID: "d0", Role: RoleDecode}}, []*recorder{dec}
		}, 0},
		{"prefill without params", FallbackPrefillNoParams, func(t *testing.T) ([]ReplicaConfig, []*recorder) {
			_, pu := pdReplica(t, "p", "", nil) // no KV connector
			dec, du := pdReplica(t, "d", sim.RoleDecode, nil)
			return []ReplicaConfig{{URL: pu, ID: "p0", Role: RolePrefill}, {URL: du, ID: "d0", Role: RoleDecode}}, []*recorder{dec}
		}, 0},
		{"prefill past leg_deadline", FallbackPrefillDeadline, func(t *testing.T) ([]ReplicaConfig, []*recorder) {
			_, pu := pdReplica(t, "p", sim.RolePrefill, func(c *sim.Config) { c.StallFirstByte = 5 * time.Second })
			dec, du := pdReplica(t, "d", sim.RoleDecode, nil)
			return []ReplicaConfig{{URL: pu, ID: "p0", Role: RolePrefill}, {URL: du, ID: "d0", Role: RoleDecode}}, []*recorder{dec}
		}, 150 * time.Millisecond},
		{"no prefill replica", FallbackNoPrefillReplica, func(t *testing.T) ([]ReplicaConfig, []*recorder) {
			dec, du := pdReplica(t, "d", sim.RoleDecode, nil)
			return []ReplicaConfig{{URL: deadURL(t), ID: "p0", Role: RolePrefill}, {URL: du, ID: "d0", Role: RoleDecode}}, []*recorder{dec}
		}, 0},
		{"decode dial error", FallbackDecodeFailed, func(t *testing.T) ([]ReplicaConfig, []*recorder) {
			_, pu := pdReplica(t, "p", sim.RolePrefill, nil)
			both, bu := pdReplica(t, "b", sim.RoleBoth, nil)
			return []ReplicaConfig{{URL: pu, ID: "p0", Role: RolePrefill}, {URL: deadURL(t), ID: "d0", Role: RoleDecode},
				{URL: bu, ID: "b0", Role: RoleBoth}}, []*recorder{both}
		}, 0},
	} {
		for _, stream := range []bool{false, true} {
			t.Run(tc.name+" stream="+strconv.FormatBool(stream), func(t *testing.T) {
				replicas, whole := tc.replicas(t)
				cfg := pdConfig(replicas...)
				if tc.deadline > 0 {
					cfg.Disaggregation.LegDeadline = Duration(tc.deadline)
				}
				if tc.reason == FallbackDecodeFailed {
					cfg.Disaggregation.DecodePolicy = "round-robin"
				}
				f := newFixture(t, cfg, nil, nil)
				if tc.reason == FallbackNoPrefillReplica {
					require.NoError(t, f.pool.Drain("p0"))
				}
				body, prompt := pdBody("/v1/completions", stream, "")
				seen := map[FallbackReason]int{}
				for range 2 { // round-robin decode picks meet the dead decode replica in one of two
					resp, b := doPD(t, f, "/v1/completions", body)
					require.Equal(t, 200, resp.Status, string(b))
					require.Equal(t, sim.GeneratedText(prompt, 6), answerText(t, b, stream), "answered whole, correctly")
					require.NotEqual(t, "p0", resp.ReplicaID)
					if tc.reason == FallbackDecodeFailed {
						require.Equal(t, "b0", resp.ReplicaID, "never the decode replica that failed")
					}
					seen[resp.Fallback]++
				}
				require.Positive(t, seen[tc.reason], "fallbacks seen: %v", seen)
				require.Equal(t, float64(seen[tc.reason]), f.metric(t, "triage_upstream_pd_fallbacks_total",
					map[string]string{"pool": "test", "reason": string(tc.reason)}))
				params := map[string]bool{}
				for _, rc := range whole {
					bodies, _ := rc.exchanges()
					for _, b := range bodies {
						p, ok := jsonMembers(t, b)[kvTransferKey]
						if !ok {
							continue // a whole request: no params at all
						}
						require.False(t, params[string(p)], "a decode replica got the same params twice")
						params[string(p)] = true
					}
				}
				require.Zero(t, f.pool.InFlight())
			})
		}
	}
}

func TestDisaggregationConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*PoolConfig)
		want   string
	}{
		{"unknown role", func(c *PoolConfig) { c.Replicas[0].Role = "producer" }, `pool.replicas[0].role: must be one of prefill, decode, both, got "producer"`},
		{"prefill only", func(c *PoolConfig) { c.Replicas[1].Role = RolePrefill }, "pool.replicas: 2 replica(s) with role prefill and none with role decode or both"},
		{"sglang", func(c *PoolConfig) { c.Disaggregation.KVTransfer = KVTransferSGLang }, `pool.disaggregation.kv_transfer: "sglang" is not supported yet`},
		{"unknown kind", func(c *PoolConfig) { c.Disaggregation.KVTransfer = "lmcache" }, `pool.disaggregation.kv_transfer: unknown kind "lmcache"`},
		{"deadline past lease", func(c *PoolConfig) { c.Disaggregation.LegDeadline = Duration(30 * time.Second) },
			"pool.disaggregation.leg_deadline: must be below kv_lease (30s)"},
		{"no deadline", func(c *PoolConfig) { c.Disaggregation.LegDeadline = 0 }, "pool.disaggregation.leg_deadline: must be > 0"},
		{"decode policy", func(c *PoolConfig) { c.Disaggregation.DecodePolicy = "fastest" }, `pool.disaggregation.decode_policy: unknown policy "fastest"`},
		{"prefill policy", func(c *PoolConfig) { c.Disaggregation.PrefillPolicy = "" }, `pool.disaggregation.prefill_policy: unknown policy ""`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig("http://127.0.0.1:1", "http://127.0.0.1:2")
			cfg.Replicas[0].Role = RolePrefill
			require.NoError(t, cfg.Validate())
			tc.mutate(&cfg)
			require.ErrorContains(t, cfg.Validate(), tc.want)
		})
	}
}

// A pool without prefill replicas is not disaggregated, whatever its section
// says: requests run whole, on decode replicas too.
func TestPoolWithoutPrefillRunsWhole(t *testing.T) {
	_, du := pdReplica(t, "d", sim.RoleDecode, nil)
	f := newFixture(t, pdConfig(ReplicaConfig{URL: du, ID: "d0", Role: RoleDecode}), nil, nil)
	require.Nil(t, f.pool.pd)
	body, prompt := pdBody("/v1/completions", false, "")
	resp, b := doPD(t, f, "/v1/completions", body)
	require.Equal(t, sim.GeneratedText(prompt, 6), answerText(t, b, false))
	require.Nil(t, resp.Prefill)
}

func TestLegBodies(t *testing.T) {
	ms, err := members([]byte(`{"model":"x","stream":true,"stream_options":{"include_usage":true},"max_tokens":50,"n":1,"kv_transfer_params":{"a":1}}`))
	require.NoError(t, err)
	require.Equal(t, `{"model":"x","stream":false,"max_tokens":1,"n":1,"kv_transfer_params":`+string(prefillRequestParams)+`}`, string(prefillBody(ms)))
	require.Equal(t, `{"model":"x","stream":true,"stream_options":{"include_usage":true},"max_tokens":50,"n":1,"kv_transfer_params":{"b": 2}}`,
		string(decodeBody(ms, json.RawMessage(`{"b": 2}`))))
	require.Equal(t, `{"model":"x","stream":true,"stream_options":{"include_usage":true},"max_tokens":50,"n":1}`, string(wholeBody(ms)))

	for answer, ok := range map[string]bool{
		`{"kv_transfer_params":{"remote_block_ids":[1,2]}}`: true,
		`{"kv_transfer_params":null}`:                       false,
		`{"kv_transfer_params":[1]}`:                        false,
		`{"choices":[]}`:                                    false,
		`not json`:                                          false,
	} {
		_, got := kvParams([]byte(answer))
		require.Equal(t, ok, got, answer)
	}
}

// The prefill leg goes where the prompt's prefix is: a conversation's turns
// prefill on the replica that prefilled the turns before, whatever the load.
func TestPrefillFollowsThePrefix(t *testing.T) {
	_, p0 := pdReplica(t, "p0", sim.RolePrefill, nil)
	_, p1 := pdReplica(t, "p1", sim.RolePrefill, nil)
	_, du := pdReplica(t, "d", sim.RoleDecode, nil)
	cfg := pdConfig(ReplicaConfig{URL: p0, ID: "p0", Role: RolePrefill}, ReplicaConfig{URL: p1, ID: "p1", Role: RolePrefill},
		ReplicaConfig{URL: du, ID: "d0", Role: RoleDecode})
	cfg.Policy.Trace.Enabled = true
	f := newFixture(t, cfg, nil, nil)
	long := strings.Repeat("A system prompt long enough to fill several prefix blocks. ", 8)
	first := ""
	for turn := range 4 {
		prompt := long + strings.Repeat(" and then?", turn)
		resp, b := doPDRouted(t, f, "/v1/completions", `{"model":"m","prompt":`+strconv.Quote(prompt)+`,"max_tokens":2}`, prompt)
		require.Equal(t, 200, resp.Status, string(b))
		require.NotNil(t, resp.Prefill)
		if first == "" {
			first = resp.Prefill.ReplicaID
		}
		require.Equal(t, first, resp.Prefill.ReplicaID, "turn %d", turn)
	}
	tr := f.pool.PrefillTracer()
	require.NotNil(t, tr)
	recs := tr.Recent(10)
	require.Len(t, recs, 4)
	require.Equal(t, "prefix-match", recs[3].Note)
	require.NotNil(t, f.pool.DecodeTracer())
	require.Empty(t, f.pool.Tracer().Recent(10), "no request ran whole")
}

// In fleet mode a prefill pick is shared as the prefill policy saw it and steers another
// gateway's prefill policy, not its pool policy: the prompt's next turn prefills on the same
// replica from either gateway.
func TestPrefillPicksAreSharedInAFleet(t *testing.T) {
	_, p0 := pdReplica(t, "p0", sim.RolePrefill, nil)
	_, p1 := pdReplica(t, "p1", sim.RolePrefill, nil)
	_, du := pdReplica(t, "d", sim.RoleDecode, nil)
	cfg := pdConfig(ReplicaConfig{URL: p0, ID: "p0", Role: RolePrefill}, ReplicaConfig{URL: p1, ID: "p1", Role: RolePrefill},
		ReplicaConfig{URL: du, ID: "d0", Role: RoleDecode})
	gw := func(ff *fakeFleet) *Pool {
		p, err := New(cfg, Options{Logger: slog.New(slog.DiscardHandler), Picks: ff, Remote: ff})
		require.NoError(t, err)
		return p
	}
	ffa, ffb := &fakeFleet{}, &fakeFleet{}
	a, b := gw(ffa), gw(ffb)
	prompt := strings.Repeat("A system prompt shared by every turn of the conversation. ", 6)
	ask := func(p *Pool, turn string) string {
		resp, err := p.Do(context.Background(), &ForwardRequest{Method: http.MethodPost, Path: "/v1/completions", SetModel: true,
			Body: []byte(`{"prompt":` + strconv.Quote(prompt+turn) + `,"max_tokens":2}`), Routing: policy.Request{Prompt: prompt + turn}})
		require.NoError(t, err)
		_, err = io.Copy(io.Discard, resp.Body)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.NotNil(t, resp.Prefill)
		return resp.Prefill.ReplicaID
	}
	first := ask(a, "")
	var shared bool
	for _, o := range ffa.published() {
		if o.ReplicaID == first {
			require.True(t, b.ObservePick(o), "gateway b's prefill policy takes gateway a's prefill pick")
			shared = true
		}
	}
	require.True(t, shared, "the prefill pick was published: %v", ffa.published())
	// Without the shared pick b's prefill policy has no match and takes turns between the two.
	for range 3 {
		require.Equal(t, first, ask(b, " and another turn"))
	}
}

// Both legs' tokens are counted on their replicas; only the decode leg's, which are the
// request's, are priced, so a disaggregated request costs what it would whole.
func TestPrefillLegIsCountedNotPriced(t *testing.T) {
	_, pu := pdReplica(t, "p", sim.RolePrefill, nil)
	_, du := pdReplica(t, "d", sim.RoleDecode, nil)
	cfg := pdConfig(ReplicaConfig{URL: pu, ID: "p0", Role: RolePrefill}, ReplicaConfig{URL: du, ID: "d0", Role: RoleDecode})
	in, out := 1e6, 2e6 // 1 per prompt token, 2 per output token
	cfg.Prices = &Prices{InputPerMillion: &in, OutputPerMillion: &out}
	f := newFixture(t, cfg, nil, nil)
	body, prompt := pdBody("/v1/completions", false, "")
	resp, b := doPD(t, f, "/v1/completions", body)
	require.Equal(t, 200, resp.Status, string(b))
	n := float64(sim.CountTokens(prompt))
	tokens := func(replica, kind string) float64 {
		return f.metric(t, "triage_upstream_tokens_total", map[string]string{"pool": "test", "replica": replica, "kind": kind})
	}
	require.Equal(t, n, tokens("p0", "prompt"))
	require.Equal(t, 1.0, tokens("p0", "completion"))
	require.Equal(t, n, tokens("d0", "prompt"))
	require.Equal(t, 6.0, tokens("d0", "completion"))
	require.Equal(t, n+2*6, f.metric(t, "triage_upstream_cost_total", map[string]string{"pool": "test"}))
}
