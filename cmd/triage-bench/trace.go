package main

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/triage-gw/triage/bench/stats"
	"github.com/triage-gw/triage/sim"
)

// TraceConfig shapes a synthetic multi-turn chat trace built from Dolly rows.
//
// Requests arrive as one Poisson process at Rate per second during Duration
// (or until Requests have arrived, whichever is first). Each arrival is the
// next turn of one of ActiveSessions open sessions: a session is eligible
// once MinThink has passed since its previous turn was planned (if none is,
// the session idle longest goes). A session that has sent all its turns
// closes and a new one opens in its place. Every session starts with one of
// SystemPrompts shared system prompts of about SystemTokens tokens, and
// each turn carries the whole conversation so far (system, then user and
// assistant messages in order), so later turns share a growing prefix with
// earlier ones. A HeavyFraction of sessions are heavy: more turns, each
// with a long Dolly context attached.
type TraceConfig struct {
	Seed           uint64        `json:"seed"`
	Rate           float64       `json:"rate_per_s"`
	Duration       time.Duration `json:"duration_ns"`
	Requests       int           `json:"max_requests"` // 0: no cap besides Duration
	SystemPrompts  int           `json:"system_prompts"`
	SystemTokens   int           `json:"system_tokens"`
	ActiveSessions int           `json:"active_sessions"`
	HeavyFraction  float64       `json:"heavy_fraction"`
	LightTurnsMin  int           `json:"light_turns_min"`
	LightTurnsMax  int           `json:"light_turns_max"`
	HeavyTurnsMin  int           `json:"heavy_turns_min"`
	HeavyTurnsMax  int           `json:"heavy_turns_max"`
	LightContext   int           `json:"light_context_bytes"` // cap on a light turn's attached context
	HeavyContext   int           `json:"heavy_context_bytes"` // cap on a heavy turn's attached context
	AnswerBytes    int           `json:"answer_bytes"`        // cap on an assistant message in the history
	MinThink       time.Duration `json:"min_think_ns"`
	Users          int           `json:"users"`
}

// DefaultTraceConfig is the policy sweep's default scenario.
func DefaultTraceConfig() TraceConfig {
	return TraceConfig{
		Seed:           1,
		Rate:           28,
		Duration:       8 * time.Second,
		SystemPrompts:  3,
		SystemTokens:   1500,
		ActiveSessions: 16,
		HeavyFraction:  0.2,
		LightTurnsMin:  3,
		LightTurnsMax:  8,
		HeavyTurnsMin:  6,
		HeavyTurnsMax:  12,
		LightContext:   1000,
		HeavyContext:   4000,
		AnswerBytes:    1200,
		MinThink:       500 * time.Millisecond,
		Users:          8,
	}
}

// Validate reports every invalid field.
func (c TraceConfig) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("trace %s: "+format, append([]any{field}, args...)...))
	}
	if !(c.Rate > 0) || math.IsInf(c.Rate, 1) {
		bad("rate", "must be a finite number > 0, got %v", c.Rate)
	}
	if c.Duration <= 0 && c.Requests <= 0 {
		bad("duration", "duration or requests must be > 0")
	}
	if c.Duration < 0 {
		bad("duration", "must be >= 0, got %s", c.Duration)
	}
	if c.Requests < 0 {
		bad("requests", "must be >= 0, got %d", c.Requests)
	}
	if c.SystemPrompts < 1 {
		bad("system-prompts", "must be >= 1, got %d", c.SystemPrompts)
	}
	if c.SystemTokens < 0 {
		bad("system-tokens", "must be >= 0, got %d", c.SystemTokens)
	}
	if c.ActiveSessions < 1 {
		bad("active-sessions", "must be >= 1, got %d", c.ActiveSessions)
	}
	if !(c.HeavyFraction >= 0 && c.HeavyFraction <= 1) {
		bad("heavy-fraction", "must be in [0, 1], got %v", c.HeavyFraction)
	}
	if c.LightTurnsMin < 1 || c.LightTurnsMax < c.LightTurnsMin {
		bad("light-turns", "need 1 <= min <= max, got %d..%d", c.LightTurnsMin, c.LightTurnsMax)
	}
	if c.HeavyTurnsMin < 1 || c.HeavyTurnsMax < c.HeavyTurnsMin {
		bad("heavy-turns", "need 1 <= min <= max, got %d..%d", c.HeavyTurnsMin, c.HeavyTurnsMax)
	}
	if c.LightContext < 0 || c.HeavyContext < 0 || c.AnswerBytes < 0 {
		bad("context/answer bytes", "must be >= 0")
	}
	if c.MinThink < 0 {
		bad("min-think", "must be >= 0, got %s", c.MinThink)
	}
	if c.Users < 1 {
		bad("users", "must be >= 1, got %d", c.Users)
	}
	return errors.Join(errs...)
}

// TraceRequest is one chat request of a trace.
type TraceRequest struct {
	ID      int
	At      time.Duration // planned arrival, from the start of the replay
	Session int
	Turn    int  // 0-based
	Prev    int  // index of the same session's previous turn, -1 for the first
	Heavy   bool // the session is heavy
	User    string
	// Messages is the conversation up to and including this turn's user
	// message; Prompt is sim.RenderChat(Messages), what the replica caches.
	Messages    []sim.Message
	Prompt      string
	InputTokens int
}

// Trace is a generated workload.
type Trace struct {
	Config   TraceConfig
	Requests []TraceRequest
	Sessions int // sessions opened
	Heavy    int // of which heavy
}

type traceSession struct {
	id      int
	heavy   bool
	user    string
	turns   int
	next    int
	last    time.Duration
	started bool
	prev    int
	history []sim.Message
}

// GenerateTrace builds the trace described by cfg from rows. The same cfg
// and rows always give the same trace.
func GenerateTrace(cfg TraceConfig, rows []DollyRow) (*Trace, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, errors.New("trace: no dolly rows")
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x7472616365))

	// Heavy turns attach a long document; draw them from rows that have one.
	var long []int
	for i, r := range rows {
		if len(r.Context) >= 500 {
			long = append(long, i)
		}
	}
	if len(long) == 0 {
		long = make([]int, len(rows))
		for i := range rows {
			long[i] = i
		}
	}

	systems := make([]string, cfg.SystemPrompts)
	for i := range systems {
		systems[i] = systemPrompt(rng, rows, i, cfg.SystemTokens*4)
	}

	tr := &Trace{Config: cfg}
	var active []*traceSession
	open := func() *traceSession {
		s := &traceSession{id: tr.Sessions, prev: -1}
		tr.Sessions++
		s.heavy = rng.Float64() < cfg.HeavyFraction
		if s.heavy {
			tr.Heavy++
			s.turns = cfg.HeavyTurnsMin + rng.IntN(cfg.HeavyTurnsMax-cfg.HeavyTurnsMin+1)
		} else {
			s.turns = cfg.LightTurnsMin + rng.IntN(cfg.LightTurnsMax-cfg.LightTurnsMin+1)
		}
		s.user = fmt.Sprintf("user-%d", rng.IntN(cfg.Users))
		s.history = []sim.Message{{Role: "system", Content: systems[rng.IntN(len(systems))]}}
		return s
	}

	for _, at := range PoissonArrivals(rng, cfg.Rate, cfg.Duration, cfg.Requests) {
		for len(active) < cfg.ActiveSessions {
			active = append(active, open())
		}
		// Eligible: never started, or idle for MinThink. Else the idlest.
		var ready []int
		idlest := 0
		for i, s := range active {
			if !s.started || at-s.last >= cfg.MinThink {
				ready = append(ready, i)
			}
			if s.last < active[idlest].last {
				idlest = i
			}
		}
		pick := idlest
		if len(ready) > 0 {
			pick = ready[rng.IntN(len(ready))]
		}
		s := active[pick]

		row := rows[rng.IntN(len(rows))]
		ctxCap := cfg.LightContext
		if s.heavy {
			row = rows[long[rng.IntN(len(long))]]
			ctxCap = cfg.HeavyContext
		}
		user := row.Instruction
		if c := truncateUTF8(row.Context, ctxCap); c != "" {
			user += "\n\n" + c
		}
		msgs := append(s.history[:len(s.history):len(s.history)], sim.Message{Role: "user", Content: user})
		prompt := sim.RenderChat(msgs)
		id := len(tr.Requests)
		tr.Requests = append(tr.Requests, TraceRequest{
			ID: id, At: at, Session: s.id, Turn: s.next, Prev: s.prev, Heavy: s.heavy, User: s.user,
			Messages: msgs, Prompt: prompt, InputTokens: sim.CountTokens(prompt),
		})
		answer := truncateUTF8(row.Response, cfg.AnswerBytes)
		if answer == "" {
			answer = "OK."
		}
		s.history = append(msgs, sim.Message{Role: "assistant", Content: answer})
		s.next++
		s.last = at
		s.started = true
		s.prev = id
		if s.next == s.turns {
			active = append(active[:pick], active[pick+1:]...)
		}
	}
	if len(tr.Requests) == 0 {
		return nil, errors.New("trace: no request arrived; raise --rate or --duration")
	}
	return tr, nil
}

// systemPrompt builds shared system prompt number i: an agent preamble
// followed by reference documents (Dolly contexts) up to about size bytes.
// Prompts differ from their first block on.
func systemPrompt(rng *rand.Rand, rows []DollyRow, i, size int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "You are agent %d of the Triage support desk. Answer briefly and cite the operating manual below.\n\n# Operating manual\n", i)
	for b.Len() < size {
		r := rows[rng.IntN(len(rows))]
		if r.Context == "" {
			continue
		}
		b.WriteString(r.Context)
		b.WriteString("\n\n")
	}
	return truncateUTF8(b.String(), max(size, 64))
}

// truncateUTF8 cuts s to at most n bytes without splitting a character.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// PoissonArrivals returns the arrival offsets of a Poisson process of rate
// per second: exponential gaps, strictly inside (0, window] when window > 0,
// at most limit of them when limit > 0.
func PoissonArrivals(rng *rand.Rand, rate float64, window time.Duration, limit int) []time.Duration {
	var out []time.Duration
	var t float64 // seconds
	for limit <= 0 || len(out) < limit {
		t += rng.ExpFloat64() / rate
		at := time.Duration(t * float64(time.Second))
		if window > 0 && at > window {
			break
		}
		out = append(out, at)
	}
	return out
}

// TraceStats describes a trace's shape for the report header.
type TraceStats struct {
	Requests       int           `json:"requests"`
	Sessions       int           `json:"sessions"`
	HeavySessions  int           `json:"heavy_sessions"`
	HeavyRequests  int           `json:"heavy_requests"`
	InputTokens    stats.Summary `json:"input_tokens"` // "ms" fields hold tokens here
	DistinctBlocks int           `json:"distinct_blocks"`
	BlockChars     int           `json:"block_chars"`
	Span           float64       `json:"span_s"`
}

// Stats summarises t; distinct blocks are counted the way the simulator
// keys its prefix cache (chained hashes of blockChars-byte blocks), so
// DistinctBlocks is the KV working set of the whole trace.
func (t *Trace) Stats(blockChars int) TraceStats {
	st := TraceStats{Requests: len(t.Requests), Sessions: t.Sessions, HeavySessions: t.Heavy, BlockChars: blockChars}
	toks := make([]float64, 0, len(t.Requests))
	seen := make(map[uint64]struct{})
	for _, r := range t.Requests {
		toks = append(toks, float64(r.InputTokens))
		if r.Heavy {
			st.HeavyRequests++
		}
		for _, h := range sim.BlockHashes(r.Prompt, blockChars) {
			seen[h] = struct{}{}
		}
	}
	st.InputTokens = stats.SummarizeFloats(toks)
	st.DistinctBlocks = len(seen)
	if n := len(t.Requests); n > 0 {
		st.Span = t.Requests[n-1].At.Seconds()
	}
	return st
}
