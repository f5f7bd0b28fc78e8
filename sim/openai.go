package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// endpoint is the kind of generation request.
type endpoint int

const (
	chatEndpoint       endpoint = iota // POST /v1/chat/completions
	completionEndpoint                 // POST /v1/completions
	messagesEndpoint                   // POST /v1/messages (Anthropic)
	responsesEndpoint                  // POST /v1/responses (OpenAI Responses)
)

// genRequest is what the simulator needs from a parsed request.
type genRequest struct {
	kind         endpoint
	model        string
	prompt       string // rendered chat messages, or the completion prompt
	stream       bool
	includeUsage bool
	maxTokens    int    // 0: not set by the request
	tool         string // Messages: answer with a call of this tool instead of text
	store        bool   // Responses: keep the response for previous_response_id and GET
	previous     string // Responses: the previous_response_id continued
}

// apiError is an answer in the OpenAI error shape.
type apiError struct {
	status  int
	typ     string
	param   string // "" is written as null
	message string
}

func (e *apiError) Error() string { return e.message }

func badRequest(param, format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", param: param, message: fmt.Sprintf(format, args...)}
}

type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func writeError(w http.ResponseWriter, e *apiError) {
	d := errorDetail{Message: e.message, Type: e.typ}
	if e.param != "" {
		d.Param = &e.param
	}
	writeJSON(w, e.status, errorBody{Error: d})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		// Only our own response types reach here; they always marshal.
		panic(fmt.Sprintf("sim: marshal response: %v", err))
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// decodeBody unmarshals a JSON object, turning decoder errors into 400s
// that name the offending field.
func decodeBody(body []byte, v any) *apiError {
	err := json.Unmarshal(body, v)
	if err == nil {
		return nil
	}
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return badRequest("", "invalid JSON body at byte %d: %v", syn.Offset, err)
	case errors.As(err, &typ) && typ.Field == "":
		return badRequest("", "request body must be a JSON object, got %s", typ.Value)
	case errors.As(err, &typ):
		return badRequest(typ.Field, "%s: expected %s, got %s", typ.Field, jsonKind(typ.Type.Kind().String()), typ.Value)
	default:
		return badRequest("", "invalid JSON body: %v", err)
	}
}

// jsonKind names a Go kind the way a JSON user thinks of it.
func jsonKind(goKind string) string {
	switch {
	case goKind == "bool":
		return "boolean"
	case strings.HasPrefix(goKind, "int"), strings.HasPrefix(goKind, "uint"), strings.HasPrefix(goKind, "float"):
		return "number"
	case goKind == "slice":
		return "array"
	case goKind == "struct", goKind == "map", goKind == "ptr":
		return "object"
	}
	return goKind
}

// Fields the simulator reads; every other field is accepted and ignored,
// as real OpenAI clients send many (temperature, top_p, user, ...).
type chatRequestJSON struct {
	Model               string             `json:"model"`
	Messages            *[]chatMessageJSON `json:"messages"`
	Stream              bool               `json:"stream"`
	StreamOptions       *streamOptions     `json:"stream_options"`
	MaxTokens           *int               `json:"max_tokens"`
	MaxCompletionTokens *int               `json:"max_completion_tokens"`
	N                   *int               `json:"n"`
	Tools               []chatToolJSON     `json:"tools"`
	ToolChoice          json.RawMessage    `json:"tool_choice"`
}

type chatToolJSON struct {
	Function struct {
		Name string `json:"name"`
	} `json:"function"`
}

type chatMessageJSON struct {
	Role    *string         `json:"role"`
	Content json.RawMessage `json:"content"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type completionRequestJSON struct {
	Model         string          `json:"model"`
	Prompt        json.RawMessage `json:"prompt"`
	Stream        bool            `json:"stream"`
	StreamOptions *streamOptions  `json:"stream_options"`
	MaxTokens     *int            `json:"max_tokens"`
	N             *int            `json:"n"`
}

func parseChat(body []byte, defaultModel string) (genRequest, *apiError) {
	var in chatRequestJSON
	if e := decodeBody(body, &in); e != nil {
		return genRequest{}, e
	}
	if in.Messages == nil {
		return genRequest{}, badRequest("messages", "messages: required")
	}
	if len(*in.Messages) == 0 {
		return genRequest{}, badRequest("messages", "messages: must contain at least one message")
	}
	msgs := make([]Message, len(*in.Messages))
	for i, m := range *in.Messages {
		if m.Role == nil || *m.Role == "" {
			p := fmt.Sprintf("messages[%d].role", i)
			return genRequest{}, badRequest(p, "%s: required", p)
		}
		content, e := messageContent(m.Content, i)
		if e != nil {
			return genRequest{}, e
		}
		msgs[i] = Message{Role: *m.Role, Content: content}
	}
	maxTokens := in.MaxTokens
	param := "max_tokens"
	if in.MaxCompletionTokens != nil {
		maxTokens, param = in.MaxCompletionTokens, "max_completion_tokens"
	}
	req := genRequest{kind: chatEndpoint, model: in.Model, prompt: RenderChat(msgs), stream: in.Stream}
	req.tool = chatToolCall(in, msgs[len(msgs)-1].Role)
	return finishParse(req, defaultModel, in.StreamOptions, maxTokens, param, in.N)
}

// chatToolCall is the tool a chat request's answer calls, or "": as for Messages, a
// conversation offering tools whose last message is the user's (not a tool's result) gets a
// call of the named tool_choice, or of the first tool, unless tool_choice is "none".
func chatToolCall(in chatRequestJSON, lastRole string) string {
	if len(in.Tools) == 0 || lastRole != "user" || string(in.ToolChoice) == `"none"` {
		return ""
	}
	var named struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if json.Unmarshal(in.ToolChoice, &named) == nil && named.Function.Name != "" {
		return named.Function.Name
	}
	return in.Tools[0].Function.Name
}

// messageContent accepts the content forms of the chat API: a string, null
// (assistant messages with tool calls) or an array of parts, of which the
// "text" parts are concatenated and the others ignored.
func messageContent(raw json.RawMessage, i int) (string, *apiError) {
	param := fmt.Sprintf("messages[%d].content", i)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", badRequest(param, "%s: expected a string or an array of content parts", param)
	}
	var b strings.Builder
	for j, p := range parts {
		if p.Type != "text" {
			continue
		}
		if p.Text == nil {
			pp := fmt.Sprintf("%s[%d].text", param, j)
			return "", badRequest(pp, "%s: required for a text part", pp)
		}
		b.WriteString(*p.Text)
	}
	return b.String(), nil
}

func parseCompletion(body []byte, defaultModel string) (genRequest, *apiError) {
	var in completionRequestJSON
	if e := decodeBody(body, &in); e != nil {
		return genRequest{}, e
	}
	if len(in.Prompt) == 0 || string(in.Prompt) == "null" {
		return genRequest{}, badRequest("prompt", "prompt: required")
	}
	var prompt string
	if err := json.Unmarshal(in.Prompt, &prompt); err != nil {
		var batch []string
		if err := json.Unmarshal(in.Prompt, &batch); err != nil {
			return genRequest{}, badRequest("prompt", "prompt: expected a string (token arrays are not supported)")
		}
		if len(batch) != 1 {
			return genRequest{}, badRequest("prompt", "prompt: batched prompts are not supported, got %d", len(batch))
		}
		prompt = batch[0]
	}
	req := genRequest{kind: completionEndpoint, model: in.Model, prompt: prompt, stream: in.Stream}
	return finishParse(req, defaultModel, in.StreamOptions, in.MaxTokens, "max_tokens", in.N)
}

func finishParse(req genRequest, defaultModel string, so *streamOptions, maxTokens *int, maxParam string, n *int) (genRequest, *apiError) {
	if req.model == "" {
		req.model = defaultModel
	}
	if so != nil {
		if !req.stream {
			return genRequest{}, badRequest("stream_options", "stream_options: only allowed when stream is true")
		}
		req.includeUsage = so.IncludeUsage
	}
	if maxTokens != nil {
		if *maxTokens < 1 {
			return genRequest{}, badRequest(maxParam, "%s: must be >= 1, got %d", maxParam, *maxTokens)
		}
		req.maxTokens = *maxTokens
	}
	if n != nil && *n != 1 {
		return genRequest{}, badRequest("n", "n: only 1 is supported, got %d", *n)
	}
	return req, nil
}

// Response bodies. Field order and presence follow the OpenAI API, which is
// what the official clients validate.

type usage struct {
	PromptTokens        int                 `json:"prompt_tokens"`
	CompletionTokens    int                 `json:"completion_tokens"`
	TotalTokens         int                 `json:"total_tokens"`
	PromptTokensDetails promptTokensDetails `json:"prompt_tokens_details"`
}

type promptTokensDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

type chatCompletion struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"` // "chat.completion"
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []chatChoice `json:"choices"`
	Usage   usage        `json:"usage"`
	// KVTransferParams answers a prefill for a remote decode (see disagg.go).
	KVTransferParams *kvTransferOut `json:"kv_transfer_params,omitempty"`
}

type chatChoice struct {
	Index        int         `json:"index"`
	Message      chatMessage `json:"message"`
	Logprobs     *struct{}   `json:"logprobs"` // always null
	FinishReason string      `json:"finish_reason"`
}

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type chatChunk struct {
	ID      string        `json:"id"`
	Object  string        `json:"object"` // "chat.completion.chunk"
	Created int64         `json:"created"`
	Model   string        `json:"model"`
	Choices []chunkChoice `json:"choices"`
	Usage   *usage        `json:"usage,omitempty"`
}

type chunkChoice struct {
	Index        int       `json:"index"`
	Delta        delta     `json:"delta"`
	Logprobs     *struct{} `json:"logprobs"`
	FinishReason *string   `json:"finish_reason"`
}

type delta struct {
	Role    string `json:"role,omitempty"`
	Content string `json:"content"`
}

// textCompletion is both the /v1/completions answer and its stream chunks,
// as in the OpenAI API.
type textCompletion struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"` // "text_completion"
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []textChoice `json:"choices"`
	Usage   *usage       `json:"usage,omitempty"`
	// KVTransferParams answers a prefill for a remote decode (see disagg.go).
	KVTransferParams *kvTransferOut `json:"kv_transfer_params,omitempty"`
}

type textChoice struct {
	Index        int       `json:"index"`
	Text         string    `json:"text"`
	Logprobs     *struct{} `json:"logprobs"`
	FinishReason *string   `json:"finish_reason"`
}

type modelList struct {
	Object string      `json:"object"` // "list"
	Data   []modelCard `json:"data"`
}

type modelCard struct {
	ID      string `json:"id"`
	Object  string `json:"object"` // "model"
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// tokenizeRequestJSON is vLLM's /tokenize request: a completion prompt, or
// chat messages that the chat template renders first.
type tokenizeRequestJSON struct {
	Model    string             `json:"model"`
	Prompt   *string            `json:"prompt"`
	Messages *[]chatMessageJSON `json:"messages"`
}

type tokenizeResponse struct {
	Tokens      []uint32 `json:"tokens"`
	Count       int      `json:"count"`
	MaxModelLen int      `json:"max_model_len"`
}

// maxModelLen is what /tokenize reports as the context length.
const maxModelLen = 131072
