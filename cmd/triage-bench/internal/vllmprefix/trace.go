package vllmprefix

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
)

// TraceConfig shapes the multi-turn trace. Every size is a count; the text is words drawn
// from a fixed list with a seeded generator, so one seed gives one trace.
type TraceConfig struct {
	Sessions      int    // conversations
	Turns         int    // user messages per conversation
	SystemPrompts int    // distinct system prompts; session i uses prompt i mod SystemPrompts
	SystemWords   int    // words per system prompt
	UserWords     int    // words per user message
	Seed          uint64 // the generator's seed
}

// DefaultTraceConfig is 12 conversations of 5 turns over 3 system prompts.
func DefaultTraceConfig() TraceConfig {
	return TraceConfig{Sessions: 12, Turns: 5, SystemPrompts: 3, SystemWords: 160, UserWords: 30, Seed: 1}
}

// Validate reports every out-of-range field by its flag name.
func (c TraceConfig) Validate() error {
	var errs []error
	for _, f := range []struct {
		name   string
		v, max int
	}{
		{"sessions", c.Sessions, 256}, {"turns", c.Turns, 64}, {"system-prompts", c.SystemPrompts, 64},
		{"system-words", c.SystemWords, 2000}, {"user-words", c.UserWords, 2000},
	} {
		if f.v < 1 || f.v > f.max {
			errs = append(errs, fmt.Errorf("--%s: must be in [1, %d], got %d", f.name, f.max, f.v))
		}
	}
	return errors.Join(errs...)
}

// Session is one conversation of the trace: its system prompt and its user messages in
// order. The assistant's answers are whatever the engine says, appended as the trace runs.
type Session struct {
	ID     string
	System string
	Users  []string
}

// Message is one chat message as the OpenAI API takes it.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Conversation returns the messages of turn (0-based) given the answers to the earlier
// turns: the system prompt, then user and assistant messages alternating, ending with the
// turn's user message.
func (s Session) Conversation(turn int, answers []string) []Message {
	msgs := make([]Message, 0, 2+2*turn)
	msgs = append(msgs, Message{Role: "system", Content: s.System})
	for i := range turn {
		msgs = append(msgs, Message{Role: "user", Content: s.Users[i]}, Message{Role: "assistant", Content: answers[i]})
	}
	return append(msgs, Message{Role: "user", Content: s.Users[turn]})
}

// words is the trace's vocabulary: common English, which tiny-llama's tokenizer (trained on
// English questions) cuts into about one token a word.
var words = strings.Fields(`the a of to and in is it that for on with as was at by this be from
or are have not but what all were when we there can an your which their said if will each about
how up out them then she many some so these would other into has more her two like him see time
could no make than first been its who now people my made over did down only way find use may
water long little very after words called just where most know get through back much before go
good new write our used me man too any day same right look think also around another came come
work three word must because does part even place well such here take why things help put years
different away again off went old number great tell men say small every found still between name
should home big give air line set own under read last never us left end along while might next
sound below saw something thought both few those always looked show large often together asked
house world going want school important until form food keep children feet land side without boy
once animals life enough took sometimes four head above kind began almost live page got earth
need far hand high year mother light parts country father let night following picture being study
second eyes soon times story boys since white days ever paper hard near sentence better best across
during today others however sure means knew try told young miles sun ways thing whole hear example
heard several change answer room sea against top turned learn point city play toward five using
himself usually money seen car morning given`)

// NewTrace builds the trace c describes. c must be valid.
func NewTrace(c TraceConfig) []Session {
	rng := rand.New(rand.NewPCG(c.Seed, 0x7472616365))
	text := func(n int) string {
		var b strings.Builder
		for i := range n {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(words[rng.IntN(len(words))])
		}
		b.WriteByte('.')
		return b.String()
	}
	systems := make([]string, c.SystemPrompts)
	for i := range systems {
		systems[i] = fmt.Sprintf("You are assistant %d. ", i) + text(c.SystemWords)
	}
	out := make([]Session, c.Sessions)
	for i := range out {
		s := Session{ID: fmt.Sprintf("s%02d", i), System: systems[i%c.SystemPrompts], Users: make([]string, c.Turns)}
		for t := range s.Users {
			s.Users[t] = text(c.UserWords)
		}
		out[i] = s
	}
	return out
}
