package translate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Untranslatable is a Responses request field that has no chat completion form here: the
// caller answers 400 naming Param.
type Untranslatable struct {
	Param  string
	Reason string
}

func (e *Untranslatable) Error() string { return e.Param + ": " + e.Reason }

// ResponsesRequest is what the caller learnt from the Responses request that the answer's
// translation needs: the fields a Responses object echoes.
type ResponsesRequest struct {
	Instructions    *string
	MaxOutputTokens *int
	Temperature     *float64
	TopP            *float64
	User            *string
}

// Responses request shapes (only what is translated).
type rRequest struct {
	Model              json.RawMessage `json:"model"`
	Instructions       *string         `json:"instructions"`
	Input              json.RawMessage `json:"input"`
	MaxOutputTokens    *int            `json:"max_output_tokens"`
	Temperature        *float64        `json:"temperature"`
	TopP               *float64        `json:"top_p"`
	Stream             bool            `json:"stream"`
	User               *string         `json:"user"`
	Tools              json.RawMessage `json:"tools"`
	ToolChoice         json.RawMessage `json:"tool_choice"`
	PreviousResponseID json.RawMessage `json:"previous_response_id"`
}

type rItem struct {
	Type    string          `json:"type"`
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type rPart struct {
	Type     string `json:"type"`
	Text     string `json:"text"`
	ImageURL string `json:"image_url"`
}

func empty(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s == "" || s == "null" || s == "[]"
}

// ResponsesToChat translates a Responses request body (already validated by the caller) into
// a chat completion request body: instructions become a first system message, a string input
// one user message, message items messages of their role (developer as system) with their
// text and image parts. Tools, tool items (function_call, function_call_output, ...) and
// previous_response_id have no translation here and return *Untranslatable.
func ResponsesToChat(body []byte, askUsage bool) ([]byte, ResponsesRequest, error) {
	var in rRequest
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, ResponsesRequest{}, fmt.Errorf("translate: responses request: %w", err)
	}
	req := ResponsesRequest{Instructions: in.Instructions, MaxOutputTokens: in.MaxOutputTokens,
		Temperature: in.Temperature, TopP: in.TopP, User: in.User}
	switch {
	case !empty(in.PreviousResponseID):
		return nil, req, &Untranslatable{"previous_response_id", "a chat-only pool stores no responses"}
	case !empty(in.Tools):
		return nil, req, &Untranslatable{"tools", "tools are not translated to chat completions"}
	case !empty(in.ToolChoice) && strings.TrimSpace(string(in.ToolChoice)) != `"none"` && strings.TrimSpace(string(in.ToolChoice)) != `"auto"`:
		return nil, req, &Untranslatable{"tool_choice", "tools are not translated to chat completions"}
	}
	out := cRequest{Model: in.Model, Stream: in.Stream}
	if in.MaxOutputTokens != nil {
		out.MaxTokens, _ = json.Marshal(*in.MaxOutputTokens)
	}
	if in.Temperature != nil {
		out.Temperature, _ = json.Marshal(*in.Temperature)
	}
	if in.TopP != nil {
		out.TopP, _ = json.Marshal(*in.TopP)
	}
	if in.User != nil {
		out.User = *in.User
	}
	if in.Stream && askUsage {
		out.StreamOptions = &cStreamOptions{IncludeUsage: true}
	}
	if in.Instructions != nil && *in.Instructions != "" {
		out.Messages = append(out.Messages, cMessage{Role: "system", Content: *in.Instructions})
	}
	var s string
	if json.Unmarshal(in.Input, &s) == nil {
		out.Messages = append(out.Messages, cMessage{Role: "user", Content: s})
	} else {
		var items []rItem
		if err := json.Unmarshal(in.Input, &items); err != nil {
			return nil, req, fmt.Errorf("translate: input: %w", err)
		}
		for i, it := range items {
			m, err := chatMessageOf(it, fmt.Sprintf("input[%d]", i))
			if err != nil {
				return nil, req, err
			}
			out.Messages = append(out.Messages, m)
		}
	}
	b, err := marshal(out)
	return b, req, err
}

// chatMessageOf translates one input item: a message (its type "message" or left out).
func chatMessageOf(it rItem, param string) (cMessage, error) {
	if it.Type != "" && it.Type != "message" {
		return cMessage{}, &Untranslatable{param + ".type", fmt.Sprintf("%q items are not translated to chat completions (only messages)", it.Type)}
	}
	role := it.Role
	if role == "developer" {
		role = "system"
	}
	var s string
	if json.Unmarshal(it.Content, &s) == nil {
		return cMessage{Role: role, Content: s}, nil
	}
	var parts []rPart
	if err := json.Unmarshal(it.Content, &parts); err != nil {
		return cMessage{}, fmt.Errorf("translate: %s.content: %w", param, err)
	}
	var out []cPart
	for j, p := range parts {
		switch p.Type {
		case "input_text", "output_text", "text":
			out = append(out, cPart{Type: "text", Text: p.Text})
		case "input_image":
			if p.ImageURL == "" {
				return cMessage{}, &Untranslatable{fmt.Sprintf("%s.content[%d].image_url", param, j), "an image is translated from its URL only"}
			}
			out = append(out, cPart{Type: "image_url", ImageURL: &cImageURL{URL: p.ImageURL}})
		default:
			return cMessage{}, &Untranslatable{fmt.Sprintf("%s.content[%d].type", param, j), fmt.Sprintf("%q parts are not translated to chat completions", p.Type)}
		}
	}
	if len(out) == 1 && out[0].Type == "text" {
		return cMessage{Role: role, Content: out[0].Text}, nil
	}
	if role == "assistant" || role == "system" {
		// Chat wants these as text: their text parts joined.
		var b strings.Builder
		for _, p := range out {
			b.WriteString(p.Text)
		}
		return cMessage{Role: role, Content: b.String()}, nil
	}
	return cMessage{Role: role, Content: out}, nil
}

// Response is a Responses API answer (the fields this translation fills).
type Response struct {
	ID                 string          `json:"id"`
	Object             string          `json:"object"`
	CreatedAt          int64           `json:"created_at"`
	Model              string          `json:"model"`
	Status             string          `json:"status"`
	Error              any             `json:"error"`
	IncompleteDetails  map[string]any  `json:"incomplete_details"`
	Instructions       *string         `json:"instructions"`
	MaxOutputTokens    *int            `json:"max_output_tokens"`
	Temperature        *float64        `json:"temperature"`
	TopP               *float64        `json:"top_p"`
	User               *string         `json:"user"`
	Output             []ROutputItem   `json:"output"`
	ParallelToolCalls  bool            `json:"parallel_tool_calls"`
	PreviousResponseID *string         `json:"previous_response_id"`
	Store              bool            `json:"store"`
	ToolChoice         string          `json:"tool_choice"`
	Tools              []any           `json:"tools"`
	Text               map[string]any  `json:"text"`
	Metadata           map[string]any  `json:"metadata"`
	Usage              *ResponsesUsage `json:"usage"`
}

// ROutputItem is an assistant message output item.
type ROutputItem struct {
	Type    string           `json:"type"`
	ID      string           `json:"id"`
	Status  string           `json:"status"`
	Role    string           `json:"role"`
	Content []map[string]any `json:"content"`
}

// ResponsesUsage is a Responses answer's usage.
type ResponsesUsage struct {
	InputTokens         int            `json:"input_tokens"`
	InputTokensDetails  map[string]int `json:"input_tokens_details"`
	OutputTokens        int            `json:"output_tokens"`
	OutputTokensDetails map[string]int `json:"output_tokens_details"`
	TotalTokens         int            `json:"total_tokens"`
}

func responsesUsage(u *cUsage) *ResponsesUsage {
	if u == nil {
		return nil
	}
	cached := 0
	if u.PromptTokensDetails != nil {
		cached = u.PromptTokensDetails.CachedTokens
	}
	return &ResponsesUsage{InputTokens: u.PromptTokens, InputTokensDetails: map[string]int{"cached_tokens": cached},
		OutputTokens: u.CompletionTokens, OutputTokensDetails: map[string]int{"reasoning_tokens": 0},
		TotalTokens: u.PromptTokens + u.CompletionTokens}
}

func outputText(text string) map[string]any {
	return map[string]any{"type": "output_text", "text": text, "annotations": []any{}}
}

// newResponse is the Responses object of a chat completion id, in progress.
func newResponse(chatID, model string, created int64, req ResponsesRequest) Response {
	return Response{ID: "resp_" + strings.TrimPrefix(chatID, "chatcmpl-"), Object: "response", CreatedAt: created,
		Model: model, Status: "in_progress", Instructions: req.Instructions, MaxOutputTokens: req.MaxOutputTokens,
		Temperature: req.Temperature, TopP: req.TopP, User: req.User, Output: []ROutputItem{},
		ParallelToolCalls: true, ToolChoice: "auto", Tools: []any{},
		Text: map[string]any{"format": map[string]string{"type": "text"}}, Metadata: map[string]any{}}
}

func (r *Response) itemID() string { return "msg_" + strings.TrimPrefix(r.ID, "resp_") }

// finish completes r with the answer's text, finish reason and usage: "length" is status
// incomplete (max_output_tokens), as the Responses API reports a cut answer.
func (r *Response) finish(text, finish string, u *cUsage) {
	r.Status = "completed"
	if finish == "length" {
		r.Status = "incomplete"
		r.IncompleteDetails = map[string]any{"reason": "max_output_tokens"}
	}
	r.Output = []ROutputItem{{Type: "message", ID: r.itemID(), Status: "completed", Role: "assistant",
		Content: []map[string]any{outputText(text)}}}
	r.Usage = responsesUsage(u)
}

// ChatToResponse translates a chat completion answer body into a Responses object body. The
// response is not stored (store false): a chat-only replica keeps nothing to continue from.
func ChatToResponse(body []byte, req ResponsesRequest) ([]byte, error) {
	var in struct {
		cCompletion
		Created int64 `json:"created"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, fmt.Errorf("translate: chat completion: %w", err)
	}
	if len(in.Choices) == 0 {
		return nil, errors.New("translate: chat completion has no choices")
	}
	ch := in.Choices[0]
	out := newResponse(in.ID, in.Model, in.Created, req)
	text, finish := "", ""
	if ch.Message.Content != nil {
		text = *ch.Message.Content
	}
	if ch.FinishReason != nil {
		finish = *ch.FinishReason
	}
	out.finish(text, finish, in.Usage)
	return marshal(out)
}

// ResponsesStream reads a chat completion stream and yields the Responses API's typed events,
// each with its sequence_number: response.created, response.in_progress,
// response.output_item.added, response.content_part.added, a response.output_text.delta per
// chat delta, then response.output_text.done, response.content_part.done,
// response.output_item.done and response.completed (the whole response, usage included;
// status incomplete when the answer reached max_output_tokens, as vLLM sends it). Every Read
// returns whole events; a broken chat stream ends with OnBreak's bytes, or an error event.
type ResponsesStream struct {
	r   chatReader
	req ResponsesRequest
	// OnBreak returns the bytes that end a stream broken by err. Nil writes an error event.
	OnBreak func(err error) []byte

	sseOut
	seq     int
	started bool
	resp    Response
	text    strings.Builder
	finish  string
	usage   *cUsage
	broken  error
}

// NewResponsesStream translates the chat stream src for the Responses request req.
func NewResponsesStream(src io.Reader, req ResponsesRequest) *ResponsesStream {
	return &ResponsesStream{r: newChatReader(src), req: req}
}

// Err is why the chat stream broke off, or nil.
func (s *ResponsesStream) Err() error { return s.broken }

func (s *ResponsesStream) Read(p []byte) (int, error) { return s.read(p, s.step) }

func (s *ResponsesStream) step() {
	payload, ok, err := s.r.next()
	if ok {
		s.chunk(payload)
	}
	switch {
	case err == nil:
	case errors.Is(err, io.EOF):
		if s.finish != "" {
			s.end()
		} else {
			s.fail(io.ErrUnexpectedEOF)
		}
	default:
		s.fail(err)
	}
}

func (s *ResponsesStream) chunk(payload []byte) {
	if s.done {
		return
	}
	if string(payload) == "[DONE]" {
		s.end()
		return
	}
	var c struct {
		cCompletion
		Created int64 `json:"created"`
		Error   *struct {
			Message string `json:"message"`
			Code    any    `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(payload, &c); err != nil {
		return // not a chunk: skipped, as a chat client would
	}
	if c.Error != nil {
		s.emit("error", map[string]any{"code": c.Error.Code, "message": c.Error.Message, "param": nil})
		s.done = true
		return
	}
	if !s.started {
		s.start(c.ID, c.Model, c.Created)
	}
	if c.Usage != nil {
		s.usage = c.Usage
	}
	for _, ch := range c.Choices {
		if t := ch.Delta.Content; t != nil && *t != "" {
			s.text.WriteString(*t)
			s.emit("response.output_text.delta", map[string]any{"item_id": s.resp.itemID(), "output_index": 0,
				"content_index": 0, "delta": *t, "logprobs": []any{}})
		}
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			s.finish = *ch.FinishReason
		}
	}
}

func (s *ResponsesStream) start(id, model string, created int64) {
	s.started = true
	s.resp = newResponse(id, model, created, s.req)
	s.emit("response.created", map[string]any{"response": s.resp})
	s.emit("response.in_progress", map[string]any{"response": s.resp})
	s.emit("response.output_item.added", map[string]any{"output_index": 0, "item": ROutputItem{
		Type: "message", ID: s.resp.itemID(), Status: "in_progress", Role: "assistant", Content: []map[string]any{}}})
	s.emit("response.content_part.added", map[string]any{"item_id": s.resp.itemID(), "output_index": 0,
		"content_index": 0, "part": outputText("")})
}

func (s *ResponsesStream) end() {
	if s.done {
		return
	}
	if !s.started {
		s.start("", "", 0)
	}
	text := s.text.String()
	id := s.resp.itemID()
	s.emit("response.output_text.done", map[string]any{"item_id": id, "output_index": 0, "content_index": 0,
		"text": text, "logprobs": []any{}})
	s.emit("response.content_part.done", map[string]any{"item_id": id, "output_index": 0, "content_index": 0,
		"part": outputText(text)})
	s.resp.finish(text, s.finish, s.usage)
	s.emit("response.output_item.done", map[string]any{"output_index": 0, "item": s.resp.Output[0]})
	s.emit("response.completed", map[string]any{"response": s.resp})
	s.done = true
}

func (s *ResponsesStream) fail(err error) {
	if s.done {
		return
	}
	s.broken, s.done = err, true
	if s.OnBreak != nil {
		s.out = append(s.out, s.OnBreak(err)...)
		return
	}
	s.emit("error", map[string]any{"code": "upstream_error", "message": "the upstream stream broke off", "param": nil})
}

// emit appends one named event with its type and sequence number.
func (s *ResponsesStream) emit(typ string, fields map[string]any) {
	fields["type"] = typ
	fields["sequence_number"] = s.seq
	s.seq++
	b, err := marshal(fields)
	if err != nil {
		return // our own types always encode
	}
	s.out = append(s.out, "event: "...)
	s.out = append(s.out, typ...)
	s.out = append(s.out, "\ndata: "...)
	s.out = append(s.out, b...)
	s.out = append(s.out, "\n\n"...)
}
