package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/triage-gw/triage/internal/jsonscan"
	"github.com/triage-gw/triage/router"
)

// limits bound what a request may carry; from HTTPConfig.
type limits struct {
	maxTextBytes  int  // classifier input per text, after normalisation
	maxBatchTexts int  // items in one /v1/classify
	splitPasted   bool // a pasted document is the context (server.split_pasted, pasted.go)
}

// textInput is one text to classify.
type textInput struct {
	// instruction and context as the client sent them.
	instruction, context string
	// input is the classifier's input, router.Input(instruction, context). It is the
	// text the batcher sees and the text part of the cache key.
	input string
	// pasted: the instruction held a pasted document, classified as its context (pasted.go).
	pasted bool
}

// newTextInput validates and formats one text; param names it in errors ("text",
// "texts[3].text", "messages[2].content").
//
// A text longer than server.max_text_bytes is not refused: the classifier reads only the
// first max_tokens (256) word pieces of its input, a kilobyte or two of prose, so the input
// is the text's first max_text_bytes bytes, cut at a space (the request itself goes to the
// replica whole). An agent's request with a long pasted file is routed like any other, and
// the gateway's work on it (normalising, the noise filter, the cache key, tokenizing) is
// bounded by max_text_bytes, not by the body.
func newTextInput(instruction, context, param string, lim limits) (textInput, error) {
	// The classifier drops NUL bytes (as BERT's normaliser does), so a text of NULs and
	// spaces is empty to it.
	if strings.TrimSpace(strings.ReplaceAll(instruction, "\x00", "")) == "" {
		return textInput{}, badRequest("empty_text", param, "%s: must not be empty", param)
	}
	ci, cc, pasted := instruction, context, false
	if lim.splitPasted && strings.TrimSpace(context) == "" {
		if i, c, ok := splitPasted(instruction); ok {
			ci, cc, pasted = i, c, true
		}
	}
	in := router.InputWithin(ci, cc, lim.maxTextBytes)
	return textInput{instruction: instruction, context: context, input: in, pasted: pasted}, nil
}

// checkBody rejects what no JSON endpoint accepts: an empty body or invalid UTF-8
// (encoding/json would silently replace it with U+FFFD).
func checkBody(body []byte) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return badRequest("empty_body", "", "request body is empty; expected a JSON object")
	}
	if !utf8.Valid(body) {
		return badRequest("invalid_utf8", "", "request body is not valid UTF-8")
	}
	if b := bytes.TrimLeft(body, " \t\r\n"); b[0] != '{' {
		return badRequest("invalid_body", "", "request body must be a JSON object, got %s", jsonKind(b))
	}
	return nil
}

// jsonError names what encoding/json disliked. within prefixes field names for nested
// objects ("texts[2]").
func jsonError(err error, within string) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	field := func(f string) string {
		switch {
		case within == "":
			return f
		case f == "":
			return within
		}
		return within + "." + f
	}
	switch {
	case errors.As(err, &syn):
		return badRequest("invalid_json", field(""), "invalid JSON at byte %d: %v", syn.Offset, err)
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return badRequest("invalid_json", field(""), "invalid JSON: unexpected end of input")
	case errors.As(err, &typ):
		f := field(typ.Field)
		return badRequest("invalid_type", f, "%s: must be %s, got %s", nonEmpty(f, "body"), jsonTypeName(typ.Type.Kind().String()), typ.Value)
	}
	return badRequest("invalid_json", field(""), "invalid JSON: %v", err)
}

func nonEmpty(s, alt string) string {
	if s == "" {
		return alt
	}
	return s
}

// jsonTypeName names a Go kind the way a JSON user thinks of it.
func jsonTypeName(kind string) string {
	switch {
	case kind == "bool":
		return "a boolean"
	case kind == "string":
		return "a string"
	case strings.HasPrefix(kind, "int"), strings.HasPrefix(kind, "uint"), strings.HasPrefix(kind, "float"):
		return "a number"
	case kind == "slice", kind == "array":
		return "an array"
	}
	return "an object"
}

// jsonKind names the JSON type of a raw value by its first byte.
func jsonKind(raw []byte) string {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// present reports whether a field was in the object at all (null counts as present).
func present(raw json.RawMessage) bool { return len(raw) > 0 }

// stringField decodes a field that must be a JSON string.
func stringField(raw json.RawMessage, param string) (string, error) {
	if !present(raw) {
		return "", badRequest("missing_field", param, "%s: required", param)
	}
	if raw[0] != '"' {
		return "", badRequest("invalid_type", param, "%s: must be a string, got %s", param, jsonKind(raw))
	}
	// raw is a value of a body objectFields has read, so it is a valid string: its text
	// needs no second pass to validate it.
	return jsonscan.Text(raw), nil
}

// optionalString decodes an optional string field; absent gives "".
func optionalString(raw json.RawMessage, param string) (string, error) {
	if !present(raw) {
		return "", nil
	}
	return stringField(raw, param)
}

// textObject is {"text": ..., "context": ...}: the query-process body and a /v1/classify item.
type textObject struct {
	Text    json.RawMessage
	Context json.RawMessage
}

func (o *textObject) fields() map[string]*json.RawMessage {
	return map[string]*json.RawMessage{"text": &o.Text, "context": &o.Context}
}

func (o textObject) input(within string, lim limits) (textInput, error) {
	text, err := stringField(o.Text, within+"text")
	if err != nil {
		return textInput{}, err
	}
	ctx, err := optionalString(o.Context, within+"context")
	if err != nil {
		return textInput{}, err
	}
	return newTextInput(text, ctx, within+"text", lim)
}

// decodeQueryProcess reads {"text": "...", "context": "..."} (context optional; nothing else).
func decodeQueryProcess(body []byte, lim limits) (textInput, error) {
	if err := checkBody(body); err != nil {
		return textInput{}, err
	}
	var o textObject
	if err := objectFields(body, "", true, true, o.fields()); err != nil {
		return textInput{}, err
	}
	return o.input("", lim)
}

// decodeClassify reads {"text": ..., "context": ...} or {"texts": [...]} where each item is
// a string or {"text": ..., "context": ...}.
func decodeClassify(body []byte, lim limits) ([]textInput, error) {
	if err := checkBody(body); err != nil {
		return nil, err
	}
	var o struct {
		textObject
		Texts json.RawMessage
	}
	fields := o.textObject.fields()
	fields["texts"] = &o.Texts
	if err := objectFields(body, "", true, true, fields); err != nil {
		return nil, err
	}
	if !present(o.Texts) {
		if !present(o.Text) {
			return nil, badRequest("missing_field", "text", "text or texts: one is required")
		}
		in, err := o.textObject.input("", lim)
		if err != nil {
			return nil, err
		}
		return []textInput{in}, nil
	}
	if present(o.Text) {
		return nil, badRequest("invalid_request", "texts", "text and texts: give one, not both")
	}
	if present(o.Context) {
		return nil, badRequest("invalid_request", "context", "context: not allowed with texts (give each item its own context)")
	}
	if o.Texts[0] != '[' {
		return nil, badRequest("invalid_type", "texts", "texts: must be an array, got %s", jsonKind(o.Texts))
	}
	items, err := arrayItems(o.Texts, "texts")
	if err != nil {
		return nil, err
	}
	switch {
	case len(items) == 0:
		return nil, badRequest("empty_texts", "texts", "texts: must not be empty")
	case len(items) > lim.maxBatchTexts:
		return nil, badRequest("too_many_texts", "texts", "texts: at most %d items (server.max_batch_texts), got %d", lim.maxBatchTexts, len(items))
	}
	out := make([]textInput, len(items))
	for i, raw := range items {
		param := fmt.Sprintf("texts[%d]", i)
		var err error
		switch raw[0] {
		case '"':
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				return nil, badRequest("invalid_json", param, "%s: invalid string: %v", param, err)
			}
			out[i], err = newTextInput(s, "", param, lim)
		case '{':
			var item textObject
			if err := objectFields(raw, param+".", true, false, item.fields()); err != nil {
				return nil, err
			}
			out[i], err = item.input(param+".", lim)
		default:
			err = badRequest("invalid_type", param, "%s: must be a string or an object with text and optional context, got %s", param, jsonKind(raw))
		}
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// proxyInput is what routing needs from an OpenAI request.
type proxyInput struct {
	text    textInput
	prompt  string // rendered for the replica policies: "role: content\n" per message, or the prompt
	stream  bool
	user    string
	model   string // the requested model, exact case; "" when absent or null
	context bool   // the body has the non-standard top-level "context" field (stripped before forwarding)
	// includeUsage: stream_options.include_usage is true, so the client wants the stream's
	// usage chunk. usageAskable: stream_options is absent, null or an object, so the gateway
	// can set include_usage itself (anything else is left for the replica to refuse).
	includeUsage, usageAskable bool
}

// openAIFields are the fields routing reads ("model" pins or routes, and the gateway rewrites
// it to the replica's); every other field passes through untouched.
type openAIFields struct {
	Messages, Prompt, Stream, StreamOptions, User, Context, Model json.RawMessage
}

func (f *openAIFields) fields() map[string]*json.RawMessage {
	return map[string]*json.RawMessage{"messages": &f.Messages, "prompt": &f.Prompt, "stream": &f.Stream,
		"stream_options": &f.StreamOptions, "user": &f.User, "context": &f.Context, "model": &f.Model}
}

// streamOptions reads stream_options for token accounting only: it is passed on as sent,
// and a value the replica would refuse is for the replica to refuse.
func (f openAIFields) streamOptions(p *proxyInput) {
	so := bytes.TrimSpace(f.StreamOptions)
	if !present(so) || string(so) == "null" {
		p.usageAskable = true
		return
	}
	if so[0] != '{' {
		return
	}
	var v struct {
		IncludeUsage *bool `json:"include_usage"`
	}
	if json.Unmarshal(so, &v) != nil {
		return
	}
	p.usageAskable = true
	p.includeUsage = v.IncludeUsage != nil && *v.IncludeUsage
}

func (f openAIFields) common(p *proxyInput) (ctx string, err error) {
	if present(f.Stream) && string(f.Stream) != "null" {
		if err := json.Unmarshal(f.Stream, &p.stream); err != nil {
			return "", badRequest("invalid_type", "stream", "stream: must be a boolean, got %s", jsonKind(f.Stream))
		}
	}
	f.streamOptions(p)
	if present(f.User) && string(f.User) != "null" {
		if p.user, err = stringField(f.User, "user"); err != nil {
			return "", err
		}
	}
	if present(f.Model) && string(f.Model) != "null" {
		if p.model, err = stringField(f.Model, "model"); err != nil {
			return "", err
		}
	}
	if present(f.Context) {
		p.context = true
		if ctx, err = stringField(f.Context, "context"); err != nil {
			return "", err
		}
	}
	return ctx, nil
}

// decodeOpenAI reads the fields shared by the chat and completion requests into f and p and
// returns the optional top-level "context" extension.
func decodeOpenAI(body []byte, p *proxyInput) (f openAIFields, ctx string, err error) {
	if err = checkBody(body); err != nil {
		return f, "", err
	}
	if err = objectFields(body, "", false, true, f.fields()); err != nil {
		return f, "", err
	}
	ctx, err = f.common(p)
	return f, ctx, err
}

// decodeChat reads a chat completion request. The text classified is the last user message
// with text (a later one of images or audio alone leaves it the text; tool messages are never
// classified, so an agent's tool turns are classified by its task). When no user message has
// text, the request has none to classify: p.text stays empty and routing.fallback places it
// (Server.route). With a top-level "context" string (a Triage extension, removed before forwarding) the
// instruction is all text parts of that message joined by newlines and the context is that
// field; without it the instruction is the message's first text part (or its string content)
// and the context is its later text parts joined by newlines (an attached document).
func decodeChat(body []byte, lim limits) (proxyInput, error) {
	var p proxyInput
	f, extCtx, err := decodeOpenAI(body, &p)
	if err != nil {
		return p, err
	}
	if !present(f.Messages) || string(f.Messages) == "null" {
		return p, badRequest("missing_field", "messages", "messages: required")
	}
	if f.Messages[0] != '[' {
		return p, badRequest("invalid_type", "messages", "messages: must be an array, got %s", jsonKind(f.Messages))
	}
	msgs, err := arrayItems(f.Messages, "messages")
	if err != nil {
		return p, err
	}
	if len(msgs) == 0 {
		return p, badRequest("empty_messages", "messages", "messages: must contain at least one message")
	}
	var (
		rendered strings.Builder
		pick     textPicker
		anyUser  = false
	)
	for i, raw := range msgs {
		param := fmt.Sprintf("messages[%d]", i)
		if raw[0] != '{' {
			return p, badRequest("invalid_type", param, "%s: must be an object, got %s", param, jsonKind(raw))
		}
		var m struct{ Role, Content json.RawMessage }
		if err := objectFields(raw, param+".", false, false, map[string]*json.RawMessage{"role": &m.Role, "content": &m.Content}); err != nil {
			return p, err
		}
		role, err := stringField(m.Role, param+".role")
		if err != nil {
			return p, err
		}
		texts, err := contentParts(m.Content, param+".content")
		if err != nil {
			return p, err
		}
		rendered.WriteString(role)
		rendered.WriteString(": ")
		for _, t := range texts {
			rendered.WriteString(t)
		}
		rendered.WriteByte('\n')
		if role == "user" {
			anyUser = true
			pick.user(texts, param+".content")
		}
	}
	if !anyUser {
		return p, badRequest("no_user_message", "messages", "messages: no user message to classify")
	}
	var joined *string
	if p.context {
		joined = &extCtx
	}
	if p.text, err = pick.input(lim, joined); err != nil {
		return p, err
	}
	p.prompt = rendered.String()
	return p, nil
}

// contentParts returns the text of a message content: a string, null, or an array of parts
// of which the "text" ones count (images and other parts are ignored).
func contentParts(raw json.RawMessage, param string) ([]string, error) {
	if !present(raw) || string(raw) == "null" {
		return nil, nil
	}
	switch raw[0] {
	case '"':
		s, err := stringField(raw, param)
		if err != nil {
			return nil, err
		}
		return []string{s}, nil
	case '[':
	default:
		return nil, badRequest("invalid_type", param, "%s: must be a string or an array of content parts, got %s", param, jsonKind(raw))
	}
	items, err := arrayItems(raw, param)
	if err != nil {
		return nil, err
	}
	var out []string
	for j, item := range items {
		pp := fmt.Sprintf("%s[%d]", param, j)
		if item[0] != '{' {
			return nil, badRequest("invalid_type", pp, "%s: must be a content part object, got %s", pp, jsonKind(item))
		}
		var part struct{ Type, Text json.RawMessage }
		if err := objectFields(item, pp+".", false, false, map[string]*json.RawMessage{"type": &part.Type, "text": &part.Text}); err != nil {
			return nil, err
		}
		typ, err := stringField(part.Type, pp+".type")
		if err != nil {
			return nil, err
		}
		if typ != "text" {
			continue
		}
		text, err := stringField(part.Text, pp+".text")
		if err != nil {
			return nil, err
		}
		out = append(out, text)
	}
	return out, nil
}

// decodeCompletion reads a legacy completion request: prompt is a string or an array of
// strings (joined by newlines to classify); token arrays are refused. The context is the
// top-level "context" field when present.
func decodeCompletion(body []byte, lim limits) (proxyInput, error) {
	var p proxyInput
	f, ctx, err := decodeOpenAI(body, &p)
	if err != nil {
		return p, err
	}
	if !present(f.Prompt) || string(f.Prompt) == "null" {
		return p, badRequest("missing_field", "prompt", "prompt: required")
	}
	var prompt string
	switch f.Prompt[0] {
	case '"':
		if prompt, err = stringField(f.Prompt, "prompt"); err != nil {
			return p, err
		}
	case '[':
		var batch []string
		if err := json.Unmarshal(f.Prompt, &batch); err != nil {
			return p, badRequest("invalid_type", "prompt", "prompt: must be a string or an array of strings (token arrays are not supported)")
		}
		prompt = strings.Join(batch, "\n")
	default:
		return p, badRequest("invalid_type", "prompt", "prompt: must be a string or an array of strings, got %s", jsonKind(f.Prompt))
	}
	if p.text, err = newTextInput(prompt, ctx, "prompt", lim); err != nil {
		return p, err
	}
	p.prompt = prompt
	return p, nil
}

// withoutField returns body (a JSON object the decoder has read) without its top-level member
// key; every other member is kept as written, in its order. (It cannot fail; the error is
// for its callers' shape.)
func withoutField(body []byte, key string) ([]byte, error) {
	members := jsonscan.Members(body) // read already: not validated again
	out := make([]byte, 0, len(body))
	out = append(out, '{')
	for _, m := range members {
		if m.Name == key {
			continue
		}
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(out, body[m.NameStart:m.End]...)
	}
	return append(out, '}'), nil
}

// withStreamUsage returns body (a JSON object whose stream_options is absent, null or an
// object) with stream_options.include_usage set to true. Every other byte is kept as
// written: the body is spliced, not decoded and encoded again (which cost a streamed request
// with a 100 KB message about 3 ms).
func withStreamUsage(body []byte) ([]byte, error) {
	members := jsonscan.Members(body) // read already: not validated again
	const usage = `"include_usage":true`
	var opts []byte
	for _, m := range members {
		if m.Name == "stream_options" && string(m.Value) != "null" {
			opts = m.Value
		}
	}
	// The new stream_options: include_usage set in the client's object, or the object alone.
	newOpts := []byte("{" + usage + "}")
	if len(opts) > 0 && opts[0] == '{' {
		newOpts = append(make([]byte, 0, len(opts)+len(usage)+2), "{"+usage...)
		for _, m := range jsonscan.Members(opts) {
			if m.Name != "include_usage" {
				newOpts = append(newOpts, ',')
				newOpts = append(newOpts, opts[m.NameStart:m.End]...)
			}
		}
		newOpts = append(newOpts, '}')
	}
	out := make([]byte, 0, len(body)+len(newOpts)+20)
	out = append(out, `{"stream_options":`...)
	out = append(out, newOpts...)
	for _, m := range members {
		if m.Name == "stream_options" {
			continue
		}
		out = append(out, ',')
		out = append(out, body[m.NameStart:m.End]...)
	}
	return append(out, '}'), nil
}
