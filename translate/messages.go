package translate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// MessagesRequest is what the caller learnt from the Messages request that the answer's
// translation needs.
type MessagesRequest struct {
	// StopSequences are the request's stop_sequences: a chat answer stopped by one of them
	// (vLLM names it in the choice's stop_reason) reads as stop_reason "stop_sequence".
	StopSequences []string
}

// anthropic request shapes (only what is translated).
type mRequest struct {
	Model         json.RawMessage `json:"model"`
	System        json.RawMessage `json:"system"`
	Messages      []mMessage      `json:"messages"`
	MaxTokens     json.RawMessage `json:"max_tokens"`
	StopSequences []string        `json:"stop_sequences"`
	Stream        bool            `json:"stream"`
	Temperature   json.RawMessage `json:"temperature"`
	TopP          json.RawMessage `json:"top_p"`
	TopK          json.RawMessage `json:"top_k"`
	Tools         []mTool         `json:"tools"`
	ToolChoice    *mToolChoice    `json:"tool_choice"`
	Metadata      *struct {
		UserID string `json:"user_id"`
	} `json:"metadata"`
}

type mMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type mBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
	Source    *struct {
		Type      string `json:"type"`
		MediaType string `json:"media_type"`
		Data      string `json:"data"`
		URL       string `json:"url"`
	} `json:"source"`
}

type mTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema"`
}

type mToolChoice struct {
	Type                   string `json:"type"`
	Name                   string `json:"name"`
	DisableParallelToolUse bool   `json:"disable_parallel_tool_use"`
}

// chat request shapes.
type cRequest struct {
	Model             json.RawMessage `json:"model,omitempty"`
	Messages          []cMessage      `json:"messages"`
	MaxTokens         json.RawMessage `json:"max_tokens,omitempty"`
	Stop              []string        `json:"stop,omitempty"`
	Stream            bool            `json:"stream,omitempty"`
	StreamOptions     *cStreamOptions `json:"stream_options,omitempty"`
	Temperature       json.RawMessage `json:"temperature,omitempty"`
	TopP              json.RawMessage `json:"top_p,omitempty"`
	TopK              json.RawMessage `json:"top_k,omitempty"`
	Tools             []cTool         `json:"tools,omitempty"`
	ToolChoice        any             `json:"tool_choice,omitempty"`
	ParallelToolCalls *bool           `json:"parallel_tool_calls,omitempty"`
	User              string          `json:"user,omitempty"`
}

type cStreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type cMessage struct {
	Role       string      `json:"role"`
	Content    any         `json:"content"` // string, []cPart or nil
	ToolCalls  []cToolCall `json:"tool_calls,omitempty"`
	ToolCallID string      `json:"tool_call_id,omitempty"`
}

type cPart struct {
	Type     string     `json:"type"`
	Text     string     `json:"text,omitempty"`
	ImageURL *cImageURL `json:"image_url,omitempty"`
}

type cImageURL struct {
	URL string `json:"url"`
}

type cTool struct {
	Type     string    `json:"type"` // "function"
	Function cFunction `json:"function"`
}

type cFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	Arguments   string          `json:"arguments,omitempty"`
}

type cToolCall struct {
	Index    *int      `json:"index,omitempty"`
	ID       string    `json:"id,omitempty"`
	Type     string    `json:"type,omitempty"`
	Function cFunction `json:"function"`
}

// MessagesToChat translates a Messages request body (already validated by the caller) into
// a chat completion request body. A streamed request asks for the usage chunk when
// askUsage is set, so the translated stream can report its tokens.
func MessagesToChat(body []byte, askUsage bool) ([]byte, MessagesRequest, error) {
	var in mRequest
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, MessagesRequest{}, fmt.Errorf("translate: messages request: %w", err)
	}
	out := cRequest{
		Model: in.Model, MaxTokens: in.MaxTokens, Stop: in.StopSequences, Stream: in.Stream,
		Temperature: in.Temperature, TopP: in.TopP, TopK: in.TopK,
	}
	if in.Stream && askUsage {
		out.StreamOptions = &cStreamOptions{IncludeUsage: true}
	}
	if in.Metadata != nil {
		out.User = in.Metadata.UserID
	}
	if sys, err := textOf(in.System); err != nil {
		return nil, MessagesRequest{}, fmt.Errorf("translate: system: %w", err)
	} else if sys != "" {
		out.Messages = append(out.Messages, cMessage{Role: "system", Content: sys})
	}
	for i, m := range in.Messages {
		msgs, err := chatMessages(m)
		if err != nil {
			return nil, MessagesRequest{}, fmt.Errorf("translate: messages[%d]: %w", i, err)
		}
		out.Messages = append(out.Messages, msgs...)
	}
	for _, t := range in.Tools {
		out.Tools = append(out.Tools, cTool{Type: "function", Function: cFunction{Name: t.Name, Description: t.Description, Parameters: t.InputSchema}})
	}
	if tc := in.ToolChoice; tc != nil {
		switch tc.Type {
		case "auto":
			out.ToolChoice = "auto"
		case "any":
			out.ToolChoice = "required"
		case "none":
			out.ToolChoice = "none"
		case "tool":
			out.ToolChoice = map[string]any{"type": "function", "function": map[string]string{"name": tc.Name}}
		}
		if tc.DisableParallelToolUse {
			f := false
			out.ParallelToolCalls = &f
		}
	}
	b, err := marshal(out)
	return b, MessagesRequest{StopSequences: in.StopSequences}, err
}

// chatMessages translates one Messages turn. A user turn's tool_result blocks become tool
// messages, placed first: chat wants them right after the assistant's tool calls.
func chatMessages(m mMessage) ([]cMessage, error) {
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return []cMessage{{Role: m.Role, Content: s}}, nil
	}
	var blocks []mBlock
	if err := json.Unmarshal(m.Content, &blocks); err != nil {
		return nil, fmt.Errorf("content: %w", err)
	}
	var (
		out   []cMessage
		parts []cPart
		text  strings.Builder
		calls []cToolCall
	)
	for _, b := range blocks {
		switch b.Type {
		case "text":
			parts = append(parts, cPart{Type: "text", Text: b.Text})
			text.WriteString(b.Text)
		case "image":
			if b.Source == nil {
				continue
			}
			url := b.Source.URL
			if b.Source.Type == "base64" {
				url = "data:" + b.Source.MediaType + ";base64," + b.Source.Data
			}
			parts = append(parts, cPart{Type: "image_url", ImageURL: &cImageURL{URL: url}})
		case "tool_use":
			input := b.Input
			if len(input) == 0 || string(input) == "null" {
				input = json.RawMessage("{}")
			}
			calls = append(calls, cToolCall{ID: b.ID, Type: "function", Function: cFunction{Name: b.Name, Arguments: string(compact(input))}})
		case "tool_result":
			content, err := textOf(b.Content)
			if err != nil {
				return nil, fmt.Errorf("tool_result content: %w", err)
			}
			if b.IsError {
				content = "Error: " + content
			}
			out = append(out, cMessage{Role: "tool", ToolCallID: b.ToolUseID, Content: content})
		}
	}
	switch {
	case m.Role == "assistant":
		msg := cMessage{Role: "assistant", ToolCalls: calls}
		if text.Len() > 0 || len(calls) == 0 {
			msg.Content = text.String()
		}
		out = append(out, msg)
	case len(parts) == 1 && parts[0].Type == "text":
		out = append(out, cMessage{Role: m.Role, Content: parts[0].Text})
	case len(parts) > 0:
		out = append(out, cMessage{Role: m.Role, Content: parts})
	}
	return out, nil
}

// textOf is the text of a string, or of the text blocks of an array, joined by newlines.
func textOf(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var blocks []mBlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return "", err
	}
	var texts []string
	for _, b := range blocks {
		if b.Type == "text" {
			texts = append(texts, b.Text)
		}
	}
	return strings.Join(texts, "\n"), nil
}

// chat answer shapes.
type cCompletion struct {
	ID      string    `json:"id"`
	Model   string    `json:"model"`
	Choices []cChoice `json:"choices"`
	Usage   *cUsage   `json:"usage"`
}

type cChoice struct {
	Message struct {
		Content   *string     `json:"content"`
		ToolCalls []cToolCall `json:"tool_calls"`
	} `json:"message"`
	Delta struct {
		Content   *string     `json:"content"`
		ToolCalls []cToolCall `json:"tool_calls"`
	} `json:"delta"`
	FinishReason *string         `json:"finish_reason"`
	StopReason   json.RawMessage `json:"stop_reason"` // vLLM: the stop string or token id matched
}

type cUsage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
		// CreatedCacheTokens is vLLM's count of the prompt tokens written to its prefix cache
		// (whole blocks) by this request.
		CreatedCacheTokens int `json:"created_cache_tokens"`
	} `json:"prompt_tokens_details"`
}

// Usage is a Messages answer's usage, split as Anthropic splits it: the prompt is
// input_tokens + cache_read_input_tokens + cache_creation_input_tokens, so input_tokens are
// the prompt tokens neither read from nor written to a cache.
type Usage struct {
	InputTokens              int `json:"input_tokens"`
	OutputTokens             int `json:"output_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
}

func usageOf(u *cUsage) Usage {
	if u == nil {
		return Usage{}
	}
	cached, created := 0, 0
	if d := u.PromptTokensDetails; d != nil {
		cached = max(0, min(d.CachedTokens, u.PromptTokens))
		created = max(0, min(d.CreatedCacheTokens, u.PromptTokens-cached))
	}
	// As vLLM's own /v1/messages splits the same chat usage, so that a chat-only pool of
	// vLLM engines answers what a Messages pool of them would.
	return Usage{InputTokens: u.PromptTokens - cached - created, OutputTokens: u.CompletionTokens,
		CacheReadInputTokens: cached, CacheCreationInputTokens: created}
}

// Message is a Messages answer.
type Message struct {
	ID           string           `json:"id"`
	Type         string           `json:"type"`
	Role         string           `json:"role"`
	Model        string           `json:"model"`
	Content      []map[string]any `json:"content"`
	StopReason   *string          `json:"stop_reason"`
	StopSequence *string          `json:"stop_sequence"`
	Usage        Usage            `json:"usage"`
}

// Calls says whether an answer called tools: Used when it has a tool call, Complete when
// every call's arguments are a whole JSON object.
type Calls struct{ Used, Complete bool }

// callsOf is the Calls of a chat answer's tool call arguments.
func callsOf[T string | []byte](args []T) Calls {
	c := Calls{Used: len(args) > 0, Complete: len(args) > 0}
	for _, a := range args {
		b := bytes.TrimSpace([]byte(a))
		if len(b) == 0 || b[0] != '{' || !json.Valid(b) {
			c.Complete = false
		}
	}
	return c
}

// StopReason maps a chat finish_reason (and vLLM's stop_reason, the stop string matched) to
// the Messages stop_reason and stop_sequence. An answer that called a tool stopped for
// tool_use even when its finish_reason is "stop", which is how chat servers (vLLM among them)
// end a call forced by a named tool_choice; a stop sequence that cut a call short wins over
// it, so that a client does not run a call with broken arguments. This is the rule of vLLM's
// own /v1/messages.
func StopReason(finish string, matched json.RawMessage, req MessagesRequest, calls Calls) (reason string, sequence *string) {
	switch finish {
	case "length":
		return "max_tokens", nil
	case "tool_calls", "function_call":
		return "tool_use", nil
	case "content_filter":
		return "refusal", nil
	}
	if calls.Used && calls.Complete {
		return "tool_use", nil
	}
	var s string
	if json.Unmarshal(matched, &s) == nil && slices.Contains(req.StopSequences, s) {
		return "stop_sequence", &s
	}
	if calls.Used {
		return "tool_use", nil
	}
	return "end_turn", nil
}

func messageID(chatID string) string {
	if strings.HasPrefix(chatID, "msg_") {
		return chatID
	}
	return "msg_" + chatID
}

// ChatToMessage translates a chat completion answer body into a Messages answer body.
func ChatToMessage(body []byte, req MessagesRequest) ([]byte, error) {
	var in cCompletion
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, fmt.Errorf("translate: chat completion: %w", err)
	}
	if len(in.Choices) == 0 {
		return nil, fmt.Errorf("translate: chat completion has no choices")
	}
	ch := in.Choices[0]
	out := Message{ID: messageID(in.ID), Type: "message", Role: "assistant", Model: in.Model, Content: []map[string]any{}, Usage: usageOf(in.Usage)}
	if c := ch.Message.Content; c != nil && *c != "" {
		out.Content = append(out.Content, map[string]any{"type": "text", "text": *c})
	}
	var args []string
	for _, tc := range ch.Message.ToolCalls {
		out.Content = append(out.Content, map[string]any{"type": "tool_use", "id": tc.ID, "name": tc.Function.Name, "input": toolInput(tc.Function.Arguments)})
		args = append(args, tc.Function.Arguments)
	}
	finish := ""
	if ch.FinishReason != nil {
		finish = *ch.FinishReason
	}
	reason, seq := StopReason(finish, ch.StopReason, req, callsOf(args))
	out.StopReason, out.StopSequence = &reason, seq
	return marshal(out)
}

// toolInput is a tool call's arguments as the object Messages wants. Arguments that are not
// a JSON object (a model's malformed output) are kept as a string under "arguments", so the
// client sees what the model produced rather than nothing.
func toolInput(args string) json.RawMessage {
	raw := bytes.TrimSpace([]byte(args))
	if len(raw) == 0 {
		return json.RawMessage("{}")
	}
	if raw[0] == '{' && json.Valid(raw) {
		return raw
	}
	b, _ := json.Marshal(map[string]string{"arguments": args})
	return b
}

// ErrorType is the Messages error type of an HTTP status.
func ErrorType(status int) string {
	switch status {
	case 400, 405, 413, 415, 422, 431:
		return "invalid_request_error"
	case 401:
		return "authentication_error"
	case 403:
		return "permission_error"
	case 404:
		return "not_found_error"
	case 429:
		return "rate_limit_error"
	case 503, 529:
		return "overloaded_error"
	}
	if status >= 400 && status < 500 {
		return "invalid_request_error"
	}
	return "api_error"
}

// ErrorBody is the Messages error shape: {"type":"error","error":{"type","message"}}.
func ErrorBody(typ, message string) []byte {
	b, _ := marshal(map[string]any{"type": "error", "error": map[string]string{"type": typ, "message": message}})
	return b
}

// ChatErrorToMessages translates an OpenAI-shaped error answer into the Messages shape,
// keeping its message (or, when the body is no such error, saying so with the status).
func ChatErrorToMessages(status int, body []byte) []byte {
	var e struct {
		Error *struct {
			Message string `json:"message"`
		} `json:"error"`
		Message string `json:"message"`
	}
	msg := fmt.Sprintf("the replica answered status %d", status)
	if json.Unmarshal(body, &e) == nil {
		switch {
		case e.Error != nil && e.Error.Message != "":
			msg = e.Error.Message
		case e.Message != "":
			msg = e.Message
		}
	}
	return ErrorBody(ErrorType(status), msg)
}

func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("translate: encode: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

func compact(raw json.RawMessage) []byte {
	var buf bytes.Buffer
	if json.Compact(&buf, raw) != nil {
		return raw
	}
	return buf.Bytes()
}
