package server

import "strings"

// The routed APIs classify a conversation by one user turn's text: the instruction (the
// request in the user's words) and its context. Agents put more than the user's words in a
// user turn, and classifying those would route every request of an agent alike, or a tool
// loop by whatever the tool printed. So:
//
//   - A text part wholly wrapped in a tag that agents use for what they inject (Claude Code's
//     <system-reminder>, Cline's and Roo Code's <environment_details>, Codex's
//     <environment_context> and <user_instructions> user messages; injectedTags) is left
//     out of the classifier's input: it is neither the user's request nor a document the
//     request is about. (As a context it would still move the decision: the model reads a
//     context as a document attached to the request. Measured with scripts/agent_turns.py
//     --reminders: 63 of 80 tasks changed pool with their reminder as context.) Other
//     wrapped parts (<document>...</document>) are the user's and count as text.
//   - The turn classified is the last with a text of the user's own (neither blank nor
//     injected); else the last turn of tool output (Messages' tool_result blocks, Responses'
//     function_call_output); else the last whose texts are all injected or blank; else none:
//     routing.fallback places the request (reason no_text).

// injectedTags are the tags of the context agents add to a user turn.
var injectedTags = map[string]bool{"system-reminder": true, "environment_details": true, "environment_context": true,
	"user_instructions": true}

// injected reports whether s is one element of an injectedTags tag.
func injected(s string) bool { return injectedTags[wrapped(s)] }

// wrapped returns the tag name when s, spaces around it aside, is one tagged element ("<name"
// then ">" or a space at its start, "</name>" at its end), else "".
func wrapped(s string) string {
	s = strings.TrimSpace(s)
	if len(s) < 7 || s[0] != '<' || s[len(s)-1] != '>' {
		return ""
	}
	n := 1
	for n < len(s) && tagByte(s[n], n == 1) {
		n++
	}
	if n == 1 || n == len(s) || (s[n] != '>' && s[n] != ' ' && s[n] != '\n' && s[n] != '\t') {
		return ""
	}
	name := s[1:n]
	if len(s) < 2*len(name)+5 || !strings.HasSuffix(s, "</"+name+">") {
		return ""
	}
	return name
}

// tagByte reports whether c may be in an XML-like tag name (ASCII letters first; then digits,
// '-', '_', '.', ':' too).
func tagByte(c byte, first bool) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		return true
	case first:
		return false
	}
	return c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == ':'
}

// ownText reports whether p is a text of the user's own: neither blank nor injected.
func ownText(p string) bool { return strings.TrimSpace(p) != "" && !injected(p) }

// kept returns the parts classified: the user's own (blank and injected parts left out); when
// no part is the user's own, those that are not blank; when all are blank, all of them
// (newTextInput refuses them).
func kept(parts []string) []string {
	out := make([]string, 0, len(parts))
	for _, keep := range []func(string) bool{ownText, func(p string) bool { return strings.TrimSpace(p) != "" }} {
		for _, p := range parts {
			if keep(p) {
				out = append(out, p)
			}
		}
		if len(out) > 0 {
			return out
		}
	}
	return parts
}

// split returns parts' instruction and context: of the parts kept, the first is the
// instruction and the others, in order, joined by newlines, its context.
func split(parts []string) (instruction, context string) {
	k := kept(parts)
	if len(k) == 0 {
		return "", ""
	}
	return k[0], strings.Join(k[1:], "\n")
}

// ownWords reports whether parts hold a text of the user's own.
func ownWords(parts []string) bool {
	for _, p := range parts {
		if ownText(p) {
			return true
		}
	}
	return false
}

// turnText is one turn's classifiable texts and the parameter that names them in errors.
type turnText struct {
	parts []string
	param string
}

// textPicker keeps, over a conversation's turns in order, the candidates for the text it is
// classified by (see the top of this file).
type textPicker struct {
	own, injectedOnly, tool turnText
}

// user offers the texts of a user turn (its own, not tool output).
func (p *textPicker) user(parts []string, param string) {
	switch {
	case len(parts) == 0:
	case ownWords(parts):
		p.own = turnText{parts, param}
	default:
		p.injectedOnly = turnText{parts, param}
	}
}

// toolOutput offers the texts of a turn of tool output.
func (p *textPicker) toolOutput(parts []string, param string) {
	if len(parts) > 0 {
		p.tool = turnText{parts, param}
	}
}

// input builds the text to classify from the picked turn (split's instruction and context; with
// extCtx, chat's "context" field, the kept parts joined are the instruction and extCtx the
// context). A zero textInput means no turn has text: routing.fallback places the request.
func (p *textPicker) input(lim limits, extCtx *string) (textInput, error) {
	t, ok := p.pick()
	if !ok {
		return textInput{}, nil
	}
	instruction, ctx := split(t.parts)
	if extCtx != nil {
		instruction, ctx = strings.Join(kept(t.parts), "\n"), *extCtx
	}
	return newTextInput(instruction, ctx, t.param, lim)
}

// pick returns the turn to classify; ok is false when no turn has text.
func (p *textPicker) pick() (t turnText, ok bool) {
	for _, c := range []turnText{p.own, p.tool, p.injectedOnly} {
		if c.parts != nil {
			return c, true
		}
	}
	return turnText{}, false
}
