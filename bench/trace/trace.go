package trace

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/triage-gw/triage/bench/dolly"
	"github.com/triage-gw/triage/sim"
)

// ErrNoRequests is returned by [Generate] when no arrival fell inside the
// window: the rate or the duration is too small.
var ErrNoRequests = errors.New("trace: no request arrived")

// Request is one chat request of a trace.
type Request struct {
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
	Config   Config
	Requests []Request
	Sessions int // sessions opened
	Heavy    int // of which heavy
}

// Generate builds the trace described by cfg from rows. The same cfg and
// rows always give the same trace.
func Generate(cfg Config, rows []dolly.Row) (*Trace, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, errors.New("trace: no dolly rows")
	}
	g := newGenerator(cfg, rows)
	for _, at := range PoissonArrivals(g.rng, cfg.Rate, cfg.Duration, cfg.Requests) {
		g.fill()
		g.turn(g.pick(at), at)
	}
	if len(g.tr.Requests) == 0 {
		return nil, ErrNoRequests
	}
	return g.tr, nil
}

// generator is the state of one Generate call. Every random draw comes from
// rng in a fixed order, which is what makes a trace reproducible: changing
// the order of draws changes every trace.
type generator struct {
	cfg     Config
	rows    []dolly.Row
	long    []int // indexes of rows with a document long enough for heavy turns
	systems []string
	rng     *rand.Rand
	tr      *Trace
	active  []*session
}

// session is an open conversation.
type session struct {
	id      int
	heavy   bool
	user    string
	turns   int // how many it will send
	next    int // its next turn
	last    time.Duration
	started bool
	prev    int // index of its latest request, -1 before the first
	history []sim.Message
}

func newGenerator(cfg Config, rows []dolly.Row) *generator {
	g := &generator{cfg: cfg, rows: rows, rng: rand.New(rand.NewPCG(cfg.Seed, 0x7472616365)), tr: &Trace{Config: cfg}}
	// Heavy turns attach a long document; draw them from rows that have one.
	for i, r := range rows {
		if len(r.Context) >= 500 {
			g.long = append(g.long, i)
		}
	}
	if len(g.long) == 0 {
		g.long = make([]int, len(rows))
		for i := range rows {
			g.long[i] = i
		}
	}
	g.systems = make([]string, cfg.SystemPrompts)
	for i := range g.systems {
		g.systems[i] = systemPrompt(g.rng, rows, i, cfg.SystemTokens*4)
	}
	return g
}

// fill opens sessions until ActiveSessions are open.
func (g *generator) fill() {
	for len(g.active) < g.cfg.ActiveSessions {
		g.active = append(g.active, g.open())
	}
}

func (g *generator) open() *session {
	c := g.cfg
	s := &session{id: g.tr.Sessions, prev: -1}
	g.tr.Sessions++
	tenants := c.HeavyUserShare > 0
	if tenants {
		s.heavy = g.heavyUserOpen() < c.HeavyUserShare*float64(c.ActiveSessions)
	} else {
		s.heavy = g.rng.Float64() < c.HeavyFraction
	}
	if s.heavy {
		g.tr.Heavy++
		s.turns = c.HeavyTurnsMin + g.rng.IntN(c.HeavyTurnsMax-c.HeavyTurnsMin+1)
	} else {
		s.turns = c.LightTurnsMin + g.rng.IntN(c.LightTurnsMax-c.LightTurnsMin+1)
	}
	switch {
	case !tenants:
		s.user = fmt.Sprintf("user-%d", g.rng.IntN(c.Users))
	case s.heavy:
		s.user = HeavyUser
	default:
		s.user = fmt.Sprintf("user-%d", 1+g.rng.IntN(c.Users-1))
	}
	s.history = []sim.Message{{Role: "system", Content: g.systems[g.rng.IntN(len(g.systems))]}}
	return s
}

// heavyUserOpen counts the open sessions of HeavyUser.
func (g *generator) heavyUserOpen() float64 {
	n := 0
	for _, s := range g.active {
		if s.user == HeavyUser {
			n++
		}
	}
	return float64(n)
}

// pick chooses the active session that sends the turn arriving at at: a
// random one among those never started or idle for MinThink, else the one
// idle longest. It returns its index in active.
func (g *generator) pick(at time.Duration) int {
	var ready []int
	idlest := 0
	for i, s := range g.active {
		if !s.started || at-s.last >= g.cfg.MinThink {
			ready = append(ready, i)
		}
		if s.last < g.active[idlest].last {
			idlest = i
		}
	}
	if len(ready) > 0 {
		return ready[g.rng.IntN(len(ready))]
	}
	return idlest
}

// turn adds the next turn of active session pick, arriving at at, and
// closes the session after its last turn.
func (g *generator) turn(pick int, at time.Duration) {
	s := g.active[pick]
	row := g.rows[g.rng.IntN(len(g.rows))]
	ctxCap := g.cfg.LightContext
	if s.heavy {
		row = g.rows[g.long[g.rng.IntN(len(g.long))]]
		ctxCap = g.cfg.HeavyContext
	}
	user := row.Instruction
	if c := truncateUTF8(row.Context, ctxCap); c != "" {
		user += "\n\n" + c
	}
	msgs := append(s.history[:len(s.history):len(s.history)], sim.Message{Role: "user", Content: user})
	prompt := sim.RenderChat(msgs)
	id := len(g.tr.Requests)
	g.tr.Requests = append(g.tr.Requests, Request{
		ID: id, At: at, Session: s.id, Turn: s.next, Prev: s.prev, Heavy: s.heavy, User: s.user,
		Messages: msgs, Prompt: prompt, InputTokens: sim.CountTokens(prompt),
	})
	answer := truncateUTF8(row.Response, g.cfg.AnswerBytes)
	if answer == "" {
		answer = "OK."
	}
	s.history = append(msgs, sim.Message{Role: "assistant", Content: answer})
	s.next++
	s.last = at
	s.started = true
	s.prev = id
	if s.next == s.turns {
		g.active = append(g.active[:pick], g.active[pick+1:]...)
	}
}

// systemPrompt builds shared system prompt number i: an agent preamble
// followed by reference documents (Dolly contexts) up to about size bytes.
// Prompts differ from their first block on.
func systemPrompt(rng *rand.Rand, rows []dolly.Row, i, size int) string {
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
