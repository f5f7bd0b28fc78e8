package sim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// The Anthropic Messages API as vLLM serves it (/v1/messages, /v1/messages/count_tokens):
// requests are rendered into the same "role: text\n" prompt as chat, so the same prompt gets
// the same words and the same prefix-cache hits whichever API carried it.

// messagesRequestJSON holds the fields the simulator reads; others are accepted and ignored.
type messagesRequestJSON struct {
	Model      string            `json:"model"`
	Messages   *[]anthropicInMsg `json:"messages"`
	System     json.RawMessage   `json:"system"`
	MaxTokens  *int              `json:"max_tokens"`
	Stream     bool              `json:"stream"`
	Tools      []anthropicTool   `json:"tools"`
	ToolChoice *struct {
		Type string `json:"type"`
		Name string `json:"name"`
	} `json:"tool_choice"`
}

type anthropicInMsg struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type anthropicTool struct {
	Name string `json:"name"`
}

// anthropicBlock is a content block of a request: text, tool_use, tool_result (whose content
// is a string or text blocks) or another kind, which counts for nothing.
type anthropicBlock struct {
	Type    string          `json:"type"`
	Text    string          `json:"text"`
	Name    string          `json:"name"`
	Input   json.RawMessage `json:"input"`
	Content json.RawMessage `json:"content"`
}

// anthropicText renders a content (a string or an array of blocks) as prompt text, and
// reports whether it holds a tool_result.
func anthropicText(raw json.RawMessage, param string) (string, bool, *apiError) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", false, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, false, nil
	}
	var blocks []anthropicBlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return "", false, badRequest(param, "%s: expected a string or an array of content blocks", param)
	}
	var b strings.Builder
	result := false
	for i, bl := range blocks {
		switch bl.Type {
		case "text":
			b.WriteString(bl.Text)
		case "tool_use":
			fmt.Fprintf(&b, "[tool_use %s %s]", bl.Name, bl.Input)
		case "tool_result":
			result = true
			inner, _, e := anthropicText(bl.Content, fmt.Sprintf("%s[%d].content", param, i))
			if e != nil {
				return "", false, e
			}
			b.WriteString(inner)
		}
	}
	return b.String(), result, nil
}

func parseMessages(body []byte, defaultModel string) (genRequest, *apiError) {
	var in messagesRequestJSON
	if e := decodeBody(body, &in); e != nil {
		return genRequest{}, e
	}
	if in.Messages == nil || len(*in.Messages) == 0 {
		return genRequest{}, badRequest("messages", "messages: must contain at least one message")
	}
	if in.MaxTokens == nil {
		return genRequest{}, badRequest("max_tokens", "max_tokens: required")
	}
	var msgs []Message
	if sys, _, e := anthropicText(in.System, "system"); e != nil {
		return genRequest{}, e
	} else if sys != "" {
		msgs = append(msgs, Message{Role: "system", Content: sys})
	}
	lastResult := false
	for i, m := range *in.Messages {
		if m.Role != "user" && m.Role != "assistant" {
			p := fmt.Sprintf("messages[%d].role", i)
			return genRequest{}, badRequest(p, "%s: must be user or assistant, got %q", p, m.Role)
		}
		text, result, e := anthropicText(m.Content, fmt.Sprintf("messages[%d].content", i))
		if e != nil {
			return genRequest{}, e
		}
		msgs = append(msgs, Message{Role: m.Role, Content: text})
		lastResult = result
	}
	req := genRequest{kind: messagesEndpoint, model: in.Model, prompt: RenderChat(msgs), stream: in.Stream}
	// A conversation offering tools whose last turn is a question (not a tool's result) gets a
	// call of the chosen tool, or of the first: enough for a client to go round the loop.
	last := (*in.Messages)[len(*in.Messages)-1]
	if len(in.Tools) > 0 && last.Role == "user" && !lastResult && (in.ToolChoice == nil || in.ToolChoice.Type != "none") {
		req.tool = in.Tools[0].Name
		if in.ToolChoice != nil && in.ToolChoice.Type == "tool" && in.ToolChoice.Name != "" {
			req.tool = in.ToolChoice.Name
		}
	}
	return finishParse(req, defaultModel, nil, in.MaxTokens, "max_tokens", nil)
}

// handleCountTokens answers /v1/messages/count_tokens: the prompt's tokens, nothing generated.
func (s *Server) handleCountTokens(w http.ResponseWriter, r *http.Request) {
	body, ok := s.readBody(w, r, messagesEndpoint)
	if !ok {
		return
	}
	// count_tokens takes no max_tokens; parse as if one were given.
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) == nil && m != nil {
		m["max_tokens"] = json.RawMessage("1")
		body, _ = json.Marshal(m)
	}
	req, e := parseMessages(body, s.cfg.Model)
	if e != nil {
		writeErrorFor(w, messagesEndpoint, e)
		return
	}
	writeJSON(w, http.StatusOK, map[string]int{"input_tokens": CountTokens(req.prompt)})
}

// Response bodies of the Messages API.

type anthropicUsage struct {
	InputTokens              int `json:"input_tokens"`
	OutputTokens             int `json:"output_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
}

type anthropicMessage struct {
	ID           string           `json:"id"`
	Type         string           `json:"type"` // "message"
	Role         string           `json:"role"`
	Model        string           `json:"model"`
	Content      []map[string]any `json:"content"`
	StopReason   *string          `json:"stop_reason"`
	StopSequence *string          `json:"stop_sequence"`
	Usage        anthropicUsage   `json:"usage"`
}

// anthropicUsage of j: input_tokens are the prompt tokens not read from the cache, as
// Anthropic counts them; the cached ones are cache_read_input_tokens.
func (j *job) anthropicUsage(output int) anthropicUsage {
	return anthropicUsage{InputTokens: j.promptTokens - j.cachedTokens, OutputTokens: output,
		CacheReadInputTokens: j.cachedTokens}
}

func (j *job) stopReason() string {
	switch {
	case j.req.tool != "":
		return "tool_use"
	case j.finish == finishLength:
		return "max_tokens"
	}
	return "end_turn"
}

func (j *job) toolUseID() string { return "toolu_" + strings.TrimPrefix(j.id, "msg-") }

// toolInput is the argument object of a simulated tool call.
func (j *job) toolInput() string {
	b, _ := json.Marshal(map[string]string{"text": GeneratedText(j.req.prompt, j.outTokens)})
	return string(b)
}

func (j *job) anthropicMessage() anthropicMessage {
	stop := j.stopReason()
	var block map[string]any
	if j.req.tool != "" {
		block = map[string]any{"type": "tool_use", "id": j.toolUseID(), "name": j.req.tool, "input": json.RawMessage(j.toolInput())}
	} else {
		block = map[string]any{"type": "text", "text": GeneratedText(j.req.prompt, j.outTokens)}
	}
	return anthropicMessage{ID: j.id, Type: "message", Role: "assistant", Model: j.req.model,
		Content: []map[string]any{block}, StopReason: &stop, Usage: j.anthropicUsage(j.outTokens)}
}

// messagesEncoder writes the Messages API's named events: message_start, a ping, one
// content block (text deltas, or one tool_use whose input arrives whole), message_delta with
// the stop reason and output tokens, message_stop.
type messagesEncoder struct{ j *job }

func (e messagesEncoder) start(buf []byte) []byte {
	m := e.j.anthropicMessage()
	m.Content, m.StopReason, m.Usage = []map[string]any{}, nil, e.j.anthropicUsage(0)
	buf = appendNamed(buf, "message_start", map[string]any{"type": "message_start", "message": m})
	var block map[string]any
	if e.j.req.tool != "" {
		block = map[string]any{"type": "tool_use", "id": e.j.toolUseID(), "name": e.j.req.tool, "input": map[string]any{}}
	} else {
		block = map[string]any{"type": "text", "text": ""}
	}
	buf = appendNamed(buf, "content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": block})
	return appendNamed(buf, "ping", map[string]string{"type": "ping"})
}

func (e messagesEncoder) token(buf []byte, i int, text string) []byte {
	if e.j.req.tool != "" {
		if i > 0 {
			return buf
		}
		return appendNamed(buf, "content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
			"delta": map[string]string{"type": "input_json_delta", "partial_json": e.j.toolInput()}})
	}
	return appendNamed(buf, "content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
		"delta": map[string]string{"type": "text_delta", "text": text}})
}

func (e messagesEncoder) end(buf []byte) []byte {
	buf = appendNamed(buf, "content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	buf = appendNamed(buf, "message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": e.j.stopReason(), "stop_sequence": nil},
		"usage": map[string]int{"output_tokens": e.j.outTokens}})
	return appendNamed(buf, "message_stop", map[string]string{"type": "message_stop"})
}

// appendNamed appends one SSE event with an event name.
func appendNamed(buf []byte, name string, v any) []byte {
	buf = append(buf, "event: "...)
	buf = append(buf, name...)
	buf = append(buf, '\n')
	return appendEvent(buf, v)
}

// anthropicErrorTypes maps a status to the Messages API's error type.
func anthropicErrorType(status int) string {
	switch status {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		return "invalid_request_error"
	case http.StatusNotFound, http.StatusMethodNotAllowed:
		return "not_found_error"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusServiceUnavailable:
		return "overloaded_error"
	}
	return "api_error"
}

// writeErrorFor writes e in the shape of the endpoint's API: Anthropic's
// {"type":"error","error":{"type","message"}} for Messages, OpenAI's otherwise.
func writeErrorFor(w http.ResponseWriter, kind endpoint, e *apiError) {
	if kind != messagesEndpoint {
		writeError(w, e)
		return
	}
	writeJSON(w, e.status, map[string]any{"type": "error",
		"error": map[string]string{"type": anthropicErrorType(e.status), "message": e.message}})
}
