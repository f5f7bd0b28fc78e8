package upstream

import (
	"fmt"
	"slices"
)

// The request shapes a pool's replicas may speak, as named in a pool's apis list.
const (
	APIChat        = "chat"        // POST /v1/chat/completions
	APICompletions = "completions" // POST /v1/completions
	APIMessages    = "messages"    // Anthropic: POST /v1/messages, /v1/messages/count_tokens
	APIResponses   = "responses"   // OpenAI Responses: POST /v1/responses, GET and DELETE /v1/responses/{id}
)

// KnownAPIs lists every API a pool may name, in the order of DefaultAPIs.
var KnownAPIs = []string{APIChat, APICompletions, APIMessages, APIResponses}

// DefaultAPIs are what vLLM (0.32 on) serves natively: all four.
func DefaultAPIs() []string { return slices.Clone(KnownAPIs) }

// Serves reports whether the pool's replicas speak api (one of KnownAPIs).
func (p *Pool) Serves(api string) bool { return slices.Contains(p.cfg.APIs, api) }

// validateAPIs checks a pool's apis list, reporting each problem through bad: known names,
// each once, and chat among them, since every other shape can fall back to it (the gateway's
// own query-process execution is a chat completion).
func validateAPIs(apis []string, bad func(field, format string, args ...any)) {
	seen := map[string]bool{}
	for i, a := range apis {
		field := fmt.Sprintf("apis[%d]", i)
		switch {
		case !slices.Contains(KnownAPIs, a):
			bad(field, "unknown API %q (known: %v)", a, KnownAPIs)
		case seen[a]:
			bad(field, "%q is given twice", a)
		}
		seen[a] = true
	}
	if !seen[APIChat] {
		bad("apis", "must include %q: the other APIs are translated to it, and /v1/query-process runs a chat completion", APIChat)
	}
}
