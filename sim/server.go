package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Response headers set by the simulator.
const (
	// HeaderReplica names the replica (Config.Name) on every response.
	HeaderReplica = "x-mockllm-replica"
	// HeaderSimulated ("true") is on every response: the text is made up. The gateway passes
	// it on to its clients, so no simulated answer can pass for a real model's.
	HeaderSimulated = "x-simulated"
	// HeaderCachedTokens is the number of prompt tokens served from the
	// prefix cache, on successful generation responses.
	HeaderCachedTokens = "x-mockllm-cached-tokens"
	// HeaderKVTransferTokens is the number of prompt tokens whose KV cache a
	// decode replica fetched from a prefill replica (see Config.Role), on
	// answers decoded from transferred blocks.
	HeaderKVTransferTokens = "x-mockllm-kv-transfer-tokens"
)

// maxBodyBytes bounds a request body; larger ones get 413.
const maxBodyBytes = 8 << 20

// Server is one simulated replica. It is an http.Handler; Serve runs it on
// a listener.
type Server struct {
	cfg          Config
	clock        Clock
	log          *slog.Logger
	drainTimeout time.Duration

	sched     *scheduler
	responses *responseStore
	cache     *prefixCache
	events    *eventPublisher // nil without Config.KVEventsEndpoint
	metrics   *metrics
	kvm       *kvMetrics
	promh     http.Handler
	created   int64 // unix seconds, for /v1/models

	rngMu sync.Mutex
	rng   *rand.Rand

	idPrefix      string
	ids           atomic.Uint64
	prefixQueries atomic.Int64
	prefixHits    atomic.Int64
	slowdown      atomic.Uint64 // math.Float64bits of SetSlowdown's factor; 0 means 1
	prefilling    atomic.Int64  // requests in their prefill now (Config.PrefillInterference)

	closed    context.Context // done after Close
	close     context.CancelFunc
	closeOnce sync.Once
}

var _ http.Handler = (*Server)(nil)

// Options are a Server's collaborators beyond its Config. The zero value is
// usable.
type Options struct {
	// Clock times every simulated delay. Nil means the wall clock.
	Clock Clock
	// Logger receives the server's logs (prompts are never logged). Nil means
	// discard.
	Logger *slog.Logger
	// DrainTimeout is how long Serve waits for in-flight requests after its
	// context ends before cutting them. 0 means 5 s.
	DrainTimeout time.Duration
}

// New validates cfg and builds a Server with its own Prometheus registry.
func New(cfg Config, opts Options) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{
		cfg:          cfg,
		clock:        realClock{},
		log:          slog.New(slog.DiscardHandler),
		drainTimeout: 5 * time.Second,
		sched:        newScheduler(cfg.MaxRunning, cfg.MaxWaiting),
		responses:    newResponseStore(),
		cache:        newPrefixCache(cfg.KVCacheBlocks),
		rng:          rand.New(rand.NewPCG(cfg.Seed, 0x6d6f636b6c6c6d)),
	}
	if opts.Clock != nil {
		s.clock = opts.Clock
	}
	if opts.Logger != nil {
		s.log = opts.Logger
	}
	if opts.DrainTimeout > 0 {
		s.drainTimeout = opts.DrainTimeout
	}
	s.created = s.clock.Now().Unix()
	h := fnv.New32a()
	fmt.Fprintf(h, "%s/%d", cfg.Name, cfg.Seed)
	s.idPrefix = fmt.Sprintf("%08x", h.Sum32())
	s.closed, s.close = context.WithCancel(context.Background())
	if cfg.KVEventsEndpoint != "" {
		ev, err := listenEvents(cfg.KVEventsEndpoint, cfg.BlockChars, s.clock)
		if err != nil {
			return nil, fmt.Errorf("sim %s: %w", cfg.Name, err)
		}
		s.events = ev
	}
	reg := prometheus.NewRegistry()
	s.metrics = newMetrics(reg, s)
	s.kvm = newKVMetrics(reg, cfg.Model)
	s.promh = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	return s, nil
}

// Config returns the configuration the server was built with.
func (s *Server) Config() Config { return s.cfg }

// Stats is a snapshot of a server's state, the same numbers /metrics shows.
type Stats struct {
	Running int // requests holding a batch slot
	Waiting int // requests queued for a slot
	// KVCacheUsage is the fraction of Config.KVCacheBlocks reserved by
	// running requests, in [0, 1]. A running request reserves
	// ceil((prompt bytes + 4*output tokens) / BlockChars) blocks for its
	// whole run, as if its output were allocated up front. It is capped at
	// 1: the simulator queues on slots only, never on KV space, so prompts
	// larger than the cache still run. 0 when KVCacheBlocks is 0.
	KVCacheUsage float64
	// CachedBlocks is the occupancy of the prefix-cache LRU.
	CachedBlocks int
	// PrefixQueryTokens and PrefixHitTokens count prompt tokens looked up
	// in and found in the prefix cache (vLLM's prefix_cache_queries/hits).
	PrefixQueryTokens int64
	PrefixHitTokens   int64
}

// Stats returns a snapshot of the server's state.
func (s *Server) Stats() Stats {
	running, waiting, kvUsed := s.sched.state()
	st := Stats{
		Running:           running,
		Waiting:           waiting,
		CachedBlocks:      s.cache.len(),
		PrefixQueryTokens: s.prefixQueries.Load(),
		PrefixHitTokens:   s.prefixHits.Load(),
	}
	if s.cfg.KVCacheBlocks > 0 {
		st.KVCacheUsage = min(1, float64(kvUsed)/float64(s.cfg.KVCacheBlocks))
	}
	return st
}

// ServeHTTP routes the simulator's endpoints. Unknown paths get 404 and
// known paths with the wrong method 405, both as OpenAI-shaped JSON.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set(HeaderReplica, s.cfg.Name)
	w.Header().Set(HeaderSimulated, "true")
	var method string
	var handle func(http.ResponseWriter, *http.Request)
	switch r.URL.Path {
	case "/v1/chat/completions":
		method, handle = http.MethodPost, s.handleChat
	case "/v1/completions":
		method, handle = http.MethodPost, s.handleCompletion
	case "/v1/messages":
		method, handle = http.MethodPost, s.handleMessages
	case "/v1/messages/count_tokens":
		method, handle = http.MethodPost, s.handleCountTokens
	case "/v1/responses":
		method, handle = http.MethodPost, s.handleResponses
	case "/v1/models":
		method, handle = http.MethodGet, s.handleModels
	case "/tokenize":
		method, handle = http.MethodPost, s.handleTokenize
	case "/health":
		method, handle = http.MethodGet, s.handleHealth
	case "/kv_event_sources":
		method, handle = http.MethodGet, s.handleKVEventSources
	case "/metrics":
		method, handle = http.MethodGet, s.promh.ServeHTTP
	default:
		if strings.HasPrefix(r.URL.Path, "/v1/responses/") {
			s.handleResponseByID(w, r)
			return
		}
		writeError(w, &apiError{status: http.StatusNotFound, typ: "invalid_request_error",
			message: fmt.Sprintf("no route for %s %s", r.Method, r.URL.Path)})
		return
	}
	if r.Method != method && !(method == http.MethodGet && r.Method == http.MethodHead) {
		w.Header().Set("Allow", method)
		writeError(w, &apiError{status: http.StatusMethodNotAllowed, typ: "invalid_request_error",
			message: fmt.Sprintf("method %s not allowed on %s (allowed: %s)", r.Method, r.URL.Path, method)})
		return
	}
	handle(w, r)
}

// handleKVEventSources answers vLLM's GET /kv_event_sources, by which a gateway finds where
// the engine publishes its KV-cache events: one data-parallel rank, "0", with the bound
// endpoint and topic, or {} when the simulator publishes none (vLLM 0.32's shapes).
func (s *Server) handleKVEventSources(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if s.events == nil {
		w.Write([]byte("{}"))
		return
	}
	json.NewEncoder(w).Encode(map[string]any{"0": map[string]any{
		"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": s.events.endpoint,
		"replay_endpoint": nil, "topic": KVEventsTopic,
	}})
}

func (s *Server) handleHealth(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if s.closed.Err() != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte("closed"))
		return
	}
	w.Write([]byte("ok"))
}

func (s *Server) handleModels(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, modelList{Object: "list", Data: []modelCard{
		{ID: s.cfg.Model, Object: "model", Created: s.created, OwnedBy: "mockllm"},
	}})
}

// Serve serves s on ln until ctx ends, then shuts down gracefully: it stops
// accepting, waits up to the drain timeout for in-flight requests, and cuts
// those still running after it (see Close). It returns once the listener
// and every connection are closed; the error is nil after a shutdown.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	drainCtx, cancel := context.WithTimeout(context.Background(), s.drainTimeout)
	defer cancel()
	if err := hs.Shutdown(drainCtx); err != nil {
		st := s.Stats()
		s.log.Warn("drain timed out, cutting in-flight requests",
			"replica", s.cfg.Name, "running", st.Running, "waiting", st.Waiting, "drain_timeout", s.drainTimeout)
		s.Close()
		hs.Close()
	}
	s.closeOnce.Do(func() {
		if s.events != nil {
			s.events.close()
		}
	})
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	}
	return nil
}

// Close makes the server refuse new generation requests (503) and report
// unhealthy, cuts in-flight ones at their next delay, and closes the KV
// events socket. It does not wait for handlers: their goroutines belong to
// the http.Server running s. Close is idempotent and always returns nil.
func (s *Server) Close() error {
	s.close()
	s.closeOnce.Do(func() {
		if s.events != nil {
			s.events.close()
		}
	})
	return nil
}

// KVEventsEndpoint returns where the server publishes its KV-cache events
// (tcp://127.0.0.1:port once bound), or "" without Config.KVEventsEndpoint.
func (s *Server) KVEventsEndpoint() string {
	if s.events == nil {
		return ""
	}
	return s.events.endpoint
}

// ClearCache empties the prefix cache, as an engine's cache reset does, and
// publishes AllBlocksCleared.
func (s *Server) ClearCache() {
	var changed func()
	if s.events != nil {
		changed = s.events.cleared
	}
	s.cache.clear(changed)
}

// handleTokenize answers vLLM's POST /tokenize: the prompt's tokens as
// Tokenize makes them, the chat messages rendered by RenderChat first, so
// they are exactly the tokens the simulator counts, caches and reports in
// its KV events.
func (s *Server) handleTokenize(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		writeError(w, badRequest("", "reading request body: %v", err))
		return
	}
	var in tokenizeRequestJSON
	if e := decodeBody(body, &in); e != nil {
		writeError(w, e)
		return
	}
	var text string
	switch {
	case in.Messages != nil:
		msgs := make([]Message, len(*in.Messages))
		for i, m := range *in.Messages {
			content, e := messageContent(m.Content, i)
			if e != nil {
				writeError(w, e)
				return
			}
			if m.Role != nil {
				msgs[i].Role = *m.Role
			}
			msgs[i].Content = content
		}
		text = RenderChat(msgs)
	case in.Prompt != nil:
		text = *in.Prompt
	default:
		writeError(w, badRequest("prompt", "prompt or messages: required"))
		return
	}
	tokens := Tokenize(text)
	writeJSON(w, http.StatusOK, tokenizeResponse{Tokens: tokens, Count: len(tokens), MaxModelLen: maxModelLen})
}
