package upstream

import (
	"bytes"
	"container/list"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/triage-gw/triage/upstream/kvevents"
	"github.com/triage-gw/triage/upstream/policy"
	"golang.org/x/sync/errgroup"
)

// KVEventsConfig is how a pool uses its replicas' KV-cache events (each
// replica's subscription is ReplicaConfig.KVEvents). It matters only when
// some replica has one.
type KVEventsConfig struct {
	// StaleAfter: a replica whose event stream has been down this long, or
	// that was sent new blocks this long ago and has said nothing since, is
	// scored by the policy's own guess until its events come back. Default
	// 10s.
	StaleAfter Duration `yaml:"stale_after" json:"stale_after"`
	// PendingTTL is how long a pick's blocks count as held by the chosen
	// replica before the engine's BlockStored confirms them, so that a burst
	// of one new prefix does not spread across replicas. Default 2s.
	PendingTTL Duration `yaml:"pending_ttl" json:"pending_ttl"`
	// BlockSize is the engines' KV block size in tokens, used for a
	// replica until its first BlockStored says (vLLM's --block-size; 16 on
	// GPUs by default) and its /metrics does not (vLLM's
	// vllm:cache_config_info, SGLang's sglang:cache_config_info): what the
	// engine states wins, with a warning in the log when it differs. 0:
	// learn it from the engines only.
	BlockSize int `yaml:"block_size" json:"block_size"`
	// TokenizeTimeout bounds the engine's POST /tokenize that turns a
	// request into token ids (with the model's chat template); past it the
	// request is routed by the guess. Default 50ms.
	TokenizeTimeout Duration `yaml:"tokenize_timeout" json:"tokenize_timeout"`
	// TokenizeCacheTokens bounds the cache of recent prompts' token ids, in
	// tokens (4 bytes each). 0 disables the cache. Default 1048576.
	TokenizeCacheTokens int `yaml:"tokenize_cache_tokens" json:"tokenize_cache_tokens"`
	// Limits bound what one replica's publisher can make the gateway hold.
	Limits kvevents.Limits `yaml:"limits" json:"limits"`
}

// DefaultKVEventsConfig returns the defaults.
func DefaultKVEventsConfig() KVEventsConfig {
	return KVEventsConfig{
		StaleAfter:          Duration(10 * time.Second),
		PendingTTL:          Duration(2 * time.Second),
		TokenizeTimeout:     Duration(50 * time.Millisecond),
		TokenizeCacheTokens: 1 << 20,
		Limits:              kvevents.DefaultLimits(),
	}
}

// ValidateAt reports every invalid field, each named from path.
func (c KVEventsConfig) ValidateAt(path string) error {
	var errs []error
	if c.StaleAfter <= 0 {
		errs = append(errs, fmt.Errorf("%s.stale_after: must be > 0, got %s", path, c.StaleAfter))
	}
	if c.PendingTTL < 0 {
		errs = append(errs, fmt.Errorf("%s.pending_ttl: must be >= 0 (0 means 2s), got %s", path, c.PendingTTL))
	}
	if c.BlockSize < 0 || c.BlockSize > 1<<16 {
		errs = append(errs, fmt.Errorf("%s.block_size: must be in [0, 65536], got %d", path, c.BlockSize))
	}
	if c.TokenizeTimeout <= 0 {
		errs = append(errs, fmt.Errorf("%s.tokenize_timeout: must be > 0, got %s", path, c.TokenizeTimeout))
	}
	if c.TokenizeCacheTokens < 0 || c.TokenizeCacheTokens > 1<<28 {
		errs = append(errs, fmt.Errorf("%s.tokenize_cache_tokens: must be in [0, %d], got %d", path, 1<<28, c.TokenizeCacheTokens))
	}
	errs = append(errs, c.Limits.ValidateAt(path+".limits"))
	return errors.Join(errs...)
}

// maxTokenizeBody bounds the engine's /tokenize answer.
const maxTokenizeBody = 64 << 20

// Results of turning a request into token ids, the values of the result
// label of triage_upstream_tokenize_total.
const (
	tokenizeOK      = "ok"      // the engine answered
	tokenizeCached  = "cached"  // a recent identical prompt's tokens were reused
	tokenizeFailed  = "error"   // no answer in time, or a bad one: routed by the guess
	tokenizeSkipped = "skipped" // nothing to tokenize (not chat or completions, or no prompt)
)

// kvRouting is a pool's use of KV-cache events: one subscriber per replica
// that has kv_events, the tokenizer calls and their cache.
type kvRouting struct {
	cfg   KVEventsConfig
	subs  map[string]*kvevents.Subscriber // replica ID → its subscriber
	order []*replica                      // the replicas with events, for /tokenize
	byID  map[string]*replica             // the same, by ID
	next  atomic.Uint64
	cache *tokenCache

	results  map[string]prometheus.Counter
	duration prometheus.Observer
}

// initKV builds the pool's kvRouting when a replica has kv_events; p.kv
// stays nil otherwise, and nothing changes for the pool.
func (p *Pool) initKV(reg prometheus.Registerer) error {
	cfg := p.cfg.KVEvents
	kv := &kvRouting{cfg: cfg, subs: map[string]*kvevents.Subscriber{}, byID: map[string]*replica{}}
	for i, rc := range p.cfg.Replicas {
		if rc.KVEvents == nil {
			continue
		}
		r := p.replicas[i]
		opts := kvevents.Options{StaleAfter: cfg.StaleAfter.Std(), PendingTTL: cfg.PendingTTL.Std(), Now: p.now}
		if rc.KVEvents.Endpoint == "" {
			opts.Discover = p.kvEventSources(r)
		}
		s, err := kvevents.NewSubscriber(p.cfg.Name, r.id, *rc.KVEvents, cfg.Limits, opts, reg, p.log)
		if err != nil {
			return fmt.Errorf("replicas[%d].kv_events: %w", i, err)
		}
		kv.subs[r.id] = s
		kv.order = append(kv.order, r)
		kv.byID[r.id] = r
	}
	if len(kv.subs) == 0 {
		return nil
	}
	var errs []error
	results := registerOrReuse(reg, &errs, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "triage_upstream_tokenize_total",
		Help: "Requests turned into token ids for KV-event routing, by result (ok, cached, error, skipped).",
	}, []string{"pool", "result"}))
	dur := registerOrReuse(reg, &errs, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "triage_upstream_tokenize_seconds",
		Help:    "Time added to a request by asking an engine's /tokenize (answered calls and failures alike).",
		Buckets: []float64{0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25},
	}, []string{"pool"}))
	if err := errors.Join(errs...); err != nil {
		return err
	}
	kv.results = map[string]prometheus.Counter{}
	for _, r := range []string{tokenizeOK, tokenizeCached, tokenizeFailed, tokenizeSkipped} {
		kv.results[r] = results.WithLabelValues(p.cfg.Name, r)
	}
	kv.duration = dur.WithLabelValues(p.cfg.Name)
	if cfg.TokenizeCacheTokens > 0 {
		kv.cache = newTokenCache(cfg.TokenizeCacheTokens)
	}
	p.kv = kv
	return nil
}

// Bounds on asking an engine where it publishes its KV events.
const (
	kvSourcesTimeout = 5 * time.Second
	maxKVSourcesBody = 1 << 20
)

// kvEventSources returns the discovery of replica r's KV-event endpoint: GET
// /kv_event_sources on the replica (vLLM), with the replica's headers, its
// answer read by kvevents.ParseSources with wildcard hosts replaced by the
// replica's host.
func (p *Pool) kvEventSources(r *replica) func(context.Context) (kvevents.Config, error) {
	return func(ctx context.Context) (kvevents.Config, error) {
		ctx, cancel := context.WithTimeout(ctx, kvSourcesTimeout)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.endpoint(kvevents.SourcesPath), nil)
		if err != nil {
			return kvevents.Config{}, err
		}
		for k, v := range r.headers {
			req.Header[k] = []string{v}
		}
		resp, err := p.transport.RoundTrip(req)
		if err != nil {
			return kvevents.Config{}, fmt.Errorf("GET %s: %w", kvevents.SourcesPath, err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, maxKVSourcesBody))
		switch {
		case err != nil:
			return kvevents.Config{}, fmt.Errorf("GET %s: %w", kvevents.SourcesPath, err)
		case resp.StatusCode == http.StatusNotFound:
			return kvevents.Config{}, fmt.Errorf("GET %s: 404: the engine does not say where it publishes "+
				"(vLLM 0.32 serves it, SGLang, llama.cpp and TGI do not): set kv_events.endpoint", kvevents.SourcesPath)
		case resp.StatusCode != http.StatusOK:
			return kvevents.Config{}, fmt.Errorf("GET %s: status %d", kvevents.SourcesPath, resp.StatusCode)
		}
		return kvevents.ParseSources(body, r.base.Hostname())
	}
}

// runKV runs every subscriber until ctx ends.
func (p *Pool) runKV(ctx context.Context) error {
	if p.kv == nil {
		return nil
	}
	g, ctx := errgroup.WithContext(ctx)
	for _, s := range p.kv.subs {
		g.Go(func() error {
			defer p.recoverPanic("kv_events")
			return s.Run(ctx)
		})
	}
	return g.Wait()
}

// attachCache sets fr.Routing.Cache from the request's token ids, when some
// replica publishes events and the request can be tokenized; otherwise it
// leaves it nil and the policy guesses. It never fails the request.
func (p *Pool) attachCache(ctx context.Context, fr *ForwardRequest) {
	kv := p.kv
	if kv == nil {
		return
	}
	r := kv.tokenizer(p.now())
	if r == nil {
		// No replica's events can be trusted now: no /tokenize call, and a
		// view that sends every replica to the guess (and counts it).
		kv.results[tokenizeSkipped].Inc()
		fr.Routing.Cache = &kvView{kv: kv}
		return
	}
	start := time.Now()
	tokens, model, result := p.tokenize(ctx, fr, r)
	if result != tokenizeSkipped && result != tokenizeCached {
		kv.duration.Observe(time.Since(start).Seconds())
	}
	kv.results[result].Inc()
	if tokens == nil {
		return
	}
	fr.Routing.InputTokens = len(tokens)
	fr.Routing.Cache = &kvView{kv: kv, tokens: tokens, lora: kvevents.LoRAKey(model)}
}

// expectBlocks tells the chosen replica's subscriber that the request's
// blocks are on their way there (the pending window), and notes first what
// the view said the replica held (Response.PredictedCachedTokens and
// PendingCachedTokens).
func (p *Pool) expectBlocks(req *policy.Request, r *replica) {
	v, ok := req.Cache.(*kvView)
	if !ok {
		return
	}
	v.pick = kvPick{replica: r.id, stored: -1}
	s := v.kv.subs[r.id]
	if s == nil {
		return
	}
	bs := v.blockSize(r.id, s)
	// One set of keys, the one the replica holds more of (the base model's
	// on a tie): pending keys of the other set would make the replica look
	// warm for requests it has never seen.
	keys, adapter := v.keysFor(bs)
	held := s.Leading(keys)
	if len(adapter) > 0 {
		if n := s.Leading(adapter); n > held {
			keys, held = adapter, n
		}
	}
	if s.Usable() && bs > 0 && len(v.tokens) > 0 {
		stored := s.Stored(keys)
		v.pick.stored, v.pick.pending = stored*bs, (held-stored)*bs
	}
	if len(keys) > 0 {
		s.Expect(keys)
	}
}

// kvPick is what the view said, at a pick, of the replica picked: the
// leading prompt tokens its engine had reported stored (-1: the view had
// nothing current to say), and those beyond them that counted as held
// only because earlier picks sent them there (the pending window).
type kvPick struct {
	replica         string
	stored, pending int
}

// pickPrediction is what expectBlocks noted for replica id; ok is false
// when there is nothing (no live events for it, or the request was not
// tokenized).
func pickPrediction(req *policy.Request, id string) (stored, pending int, ok bool) {
	v, isView := req.Cache.(*kvView)
	if !isView || v.pick.replica != id || v.pick.stored < 0 {
		return 0, 0, false
	}
	return v.pick.stored, v.pick.pending, true
}

// kvView is one request's policy.CacheView: its token ids, and their block
// keys for a block size, computed on first use. It belongs to one request,
// whose picks run one after another, so it needs no lock.
//
// The gateway does not know whether the model a request names is a base
// model or a LoRA adapter (vLLM reports an adapter's blocks under its
// name), so a request is keyed both ways: as the base model, and as an
// adapter of that name; a replica holds whichever leading run is longer.
type kvView struct {
	kv      *kvRouting
	tokens  []uint32
	lora    uint64 // kvevents.LoRAKey of the model sent; 0: none
	bs      int    // block size of the keys below
	keys    []uint64
	adapter []uint64 // keys under lora; nil when lora is 0

	// pick is the latest pick's prediction, set by expectBlocks.
	pick kvPick
}

var _ policy.CacheView = (*kvView)(nil)

// Cached implements policy.CacheView: the share of the prompt's tokens in
// the leading blocks the replica holds, for a replica whose events are
// live.
func (v *kvView) Cached(id string) (float64, bool) {
	s := v.kv.subs[id]
	if s == nil || !s.Live() {
		return 0, false
	}
	bs := v.blockSize(id, s)
	if bs == 0 || len(v.tokens) == 0 {
		s.NoteFallback()
		return 0, false
	}
	base, adapter := v.keysFor(bs)
	n := s.Leading(base)
	if len(adapter) > 0 {
		n = max(n, s.Leading(adapter))
	}
	return float64(n*bs) / float64(len(v.tokens)), true
}

// blockSize is replica id's block size: as its events said, else as its
// /metrics states (vllm:cache_config_info), else as another replica's events
// or /metrics said (a pool serves one model, so one block size; this lets a
// replica that has stored nothing since the gateway subscribed be scored as
// holding nothing rather than guessed), else the configured one. 0:
// unknown.
func (v *kvView) blockSize(id string, s *kvevents.Subscriber) int {
	if bs := s.BlockSize(); bs > 0 {
		return bs
	}
	if bs := v.kv.statedBlockSize(id); bs > 0 {
		return bs
	}
	for oid, o := range v.kv.subs {
		if bs := o.BlockSize(); bs > 0 {
			return bs
		}
		if bs := v.kv.statedBlockSize(oid); bs > 0 {
			return bs
		}
	}
	return v.kv.cfg.BlockSize
}

// statedBlockSize is the block size replica id's /metrics stated at its
// latest successful scrape; 0 when it stated none.
func (kv *kvRouting) statedBlockSize(id string) int {
	if r := kv.byID[id]; r != nil {
		if l := r.load.Load(); l != nil {
			return l.blockSize
		}
	}
	return 0
}

// kvSubscriber returns replica id's KV-event subscriber; nil when it has
// none.
func (p *Pool) kvSubscriber(id string) *kvevents.Subscriber {
	if p.kv == nil {
		return nil
	}
	return p.kv.subs[id]
}

// keysFor returns the request's keys as the base model and as an adapter.
func (v *kvView) keysFor(bs int) (base, adapter []uint64) {
	if bs != v.bs || v.keys == nil {
		v.bs = bs
		v.keys = kvevents.AppendKeys(make([]uint64, 0, len(v.tokens)/max(bs, 1)), v.tokens, bs, 0)
		if v.lora != 0 {
			v.adapter = kvevents.AppendKeys(make([]uint64, 0, len(v.keys)), v.tokens, bs, v.lora)
		}
	}
	return v.keys, v.adapter
}

// tokenizer returns the replica to ask for token ids: the next, in turn,
// of those with events that may take requests now and whose events are
// usable; nil when there is none (every stream down or silent).
func (kv *kvRouting) tokenizer(now time.Time) *replica {
	n := uint64(len(kv.order))
	start := kv.next.Add(1)
	for i := range n {
		r := kv.order[(start+i)%n]
		if r.available(now) && kv.subs[r.id].Usable() {
			return r
		}
	}
	return nil
}

// tokenize returns the request's prompt as replica r's engine tokenizes it:
// the chat template applied to the messages (with the generation prompt),
// or the completion prompt. The replicas with events run the pool's model,
// so any of them will do; the answer is cached by the prompt's hash.
func (p *Pool) tokenize(ctx context.Context, fr *ForwardRequest, r *replica) (tokens []uint32, model, result string) {
	kv := p.kv
	body, ok := tokenizeBody(fr.Path, fr.Body)
	if !ok {
		return nil, "", tokenizeSkipped
	}
	if r.model != "" {
		body["model"], _ = json.Marshal(r.model)
	}
	_ = json.Unmarshal(body["model"], &model)
	b, err := json.Marshal(body)
	if err != nil {
		return nil, "", tokenizeSkipped
	}
	key := xxhash.Sum64(b)
	if kv.cache != nil {
		if t, ok := kv.cache.get(key); ok {
			return t, model, tokenizeCached
		}
	}
	ctx, cancel := context.WithTimeout(ctx, kv.cfg.TokenizeTimeout.Std())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.endpoint("/tokenize"), bytes.NewReader(b))
	if err != nil {
		return nil, "", tokenizeFailed
	}
	for k, v := range r.headers {
		req.Header[k] = []string{v}
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.transport.RoundTrip(req)
	if err != nil {
		return nil, "", tokenizeFailed
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return nil, "", tokenizeFailed
	}
	var out struct {
		Tokens []uint32 `json:"tokens"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxTokenizeBody)).Decode(&out); err != nil || out.Tokens == nil {
		return nil, "", tokenizeFailed
	}
	if kv.cache != nil {
		kv.cache.put(key, out.Tokens)
	}
	return out.Tokens, model, tokenizeOK
}

// tokenizeBody builds vLLM's /tokenize request from a chat or completion
// request body: the fields that change the tokens, nothing else. ok is
// false for other paths and for prompts the engine would not tokenize as
// one text (token arrays, batches).
func tokenizeBody(path string, raw []byte) (map[string]json.RawMessage, bool) {
	var chat bool
	switch {
	case strings.HasSuffix(path, "/chat/completions"):
		chat = true
	case strings.HasSuffix(path, "/completions"):
	default:
		return nil, false
	}
	var in map[string]json.RawMessage
	if err := json.Unmarshal(raw, &in); err != nil {
		return nil, false
	}
	out := map[string]json.RawMessage{"model": in["model"]}
	if chat {
		if len(in["messages"]) == 0 {
			return nil, false
		}
		out["add_generation_prompt"] = json.RawMessage("true")
		for _, k := range []string{"messages", "tools", "chat_template", "chat_template_kwargs",
			"add_generation_prompt", "continue_final_message", "add_special_tokens"} {
			if v, ok := in[k]; ok {
				out[k] = v
			}
		}
		return out, true
	}
	p := bytes.TrimSpace(in["prompt"])
	if len(p) == 0 || p[0] != '"' {
		return nil, false
	}
	out["prompt"] = in["prompt"]
	if v, ok := in["add_special_tokens"]; ok {
		out["add_special_tokens"] = v
	}
	return out, true
}

// tokenCache keeps recent prompts' token ids, least recently used dropped
// beyond a total of capacity tokens. Safe for concurrent use; cached
// slices are shared and never written.
type tokenCache struct {
	capacity int

	mu    sync.Mutex
	size  int
	lru   *list.List // of *tokenEntry, front most recent
	index map[uint64]*list.Element
}

type tokenEntry struct {
	key    uint64
	tokens []uint32
}

func newTokenCache(capacity int) *tokenCache {
	return &tokenCache{capacity: capacity, lru: list.New(), index: map[uint64]*list.Element{}}
}

func (c *tokenCache) get(key uint64) ([]uint32, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.index[key]
	if !ok {
		return nil, false
	}
	c.lru.MoveToFront(e)
	return e.Value.(*tokenEntry).tokens, true
}

func (c *tokenCache) put(key uint64, tokens []uint32) {
	if len(tokens) > c.capacity/4 { // one prompt must not flush the cache
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.index[key]; ok {
		return
	}
	c.index[key] = c.lru.PushFront(&tokenEntry{key: key, tokens: tokens})
	c.size += len(tokens)
	for c.size > c.capacity {
		old := c.lru.Back()
		c.lru.Remove(old)
		ent := old.Value.(*tokenEntry)
		delete(c.index, ent.key)
		c.size -= len(ent.tokens)
	}
}
