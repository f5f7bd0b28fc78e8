package trace

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Config shapes a synthetic multi-turn chat trace built from Dolly rows.
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
// with a long Dolly context attached. Each session belongs to one of Users
// users, drawn uniformly.
//
// HeavyUserShare > 0 replaces that mix with one heavy tenant among light
// ones, the traffic fairness policies are for: the user named [HeavyUser]
// holds that share of the open sessions (so issues about that share of the
// requests, since each arrival goes to an open session picked at random),
// all its sessions are heavy, and every other session is light and belongs
// to one of the other Users-1 users. HeavyFraction is then not used.
type Config struct {
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
	HeavyUserShare float64       `json:"heavy_user_share,omitempty"` // 0: no heavy tenant
}

// HeavyUser is the user of every heavy session when Config.HeavyUserShare
// is set.
const HeavyUser = "user-0"

// DefaultConfig is the replica-policy sweep's default scenario.
func DefaultConfig() Config {
	return Config{
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

// Validate reports every invalid field. Fields are named as triage-bench's
// flags name them.
func (c Config) Validate() error {
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
	if !(c.HeavyUserShare >= 0 && c.HeavyUserShare < 1) {
		bad("heavy-user-share", "must be in [0, 1), got %v", c.HeavyUserShare)
	} else if c.HeavyUserShare > 0 && c.Users < 2 {
		bad("users", "must be >= 2 with a heavy user (one heavy, the rest light), got %d", c.Users)
	}
	return errors.Join(errs...)
}
