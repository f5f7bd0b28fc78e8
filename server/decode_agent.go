package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// messagesInput is what routing needs from an Anthropic Messages request.
type messagesInput struct {
	text   textInput
	prompt string // "role: text\n" per turn, the system prompt first, for the replica policies
	stream bool
	model  string
	user   string // metadata.user_id
	// stop are stop_sequences, for the translation of a chat answer's stop reason.
	stop []string
}

// decodeMessages reads and strictly checks a Messages request (the fields the gateway reads
// or translates, each type and each content block; other top-level fields pass through).
// The text classified is chosen by textPicker (instruction.go): the last user turn with text
// blocks of the user's own, so an agent's turn that only returns tool results is classified by
// its task; tool results only when no user text exists; none (p.text empty, placed by
// routing.fallback) for images or documents alone. The system prompt is never the
// instruction. count is set for count_tokens, which takes no max_tokens.
func decodeMessages(body []byte, lim limits, count bool) (messagesInput, error) {
	var p messagesInput
	if err := checkBody(body); err != nil {
		return p, err
	}
	var f struct {
		Model, Messages, MaxTokens, System, Stream, Tools, ToolChoice, Metadata, StopSequences,
		Temperature, TopP, TopK json.RawMessage
	}
	fields := map[string]*json.RawMessage{"model": &f.Model, "messages": &f.Messages, "max_tokens": &f.MaxTokens,
		"system": &f.System, "stream": &f.Stream, "tools": &f.Tools, "tool_choice": &f.ToolChoice,
		"metadata": &f.Metadata, "stop_sequences": &f.StopSequences, "temperature": &f.Temperature,
		"top_p": &f.TopP, "top_k": &f.TopK}
	if err := objectFields(body, "", false, true, fields); err != nil {
		return p, err
	}
	var err error
	if present(f.Model) && string(f.Model) != "null" {
		if p.model, err = stringField(f.Model, "model"); err != nil {
			return p, err
		}
	}
	if !count {
		if err := positiveInt(f.MaxTokens, "max_tokens", true); err != nil {
			return p, err
		}
	}
	if p.stream, err = optionalBool(f.Stream, "stream"); err != nil {
		return p, err
	}
	for _, n := range []namedRaw{{"temperature", f.Temperature}, {"top_p", f.TopP}, {"top_k", f.TopK}} {
		if present(n.raw) && string(n.raw) != "null" && jsonKind(n.raw) != "a number" {
			return p, badRequest("invalid_type", n.name, "%s: must be a number, got %s", n.name, jsonKind(n.raw))
		}
	}
	if p.stop, err = stringArray(f.StopSequences, "stop_sequences"); err != nil {
		return p, err
	}
	if p.user, err = messagesMetadata(f.Metadata); err != nil {
		return p, err
	}
	if err := messagesTools(f.Tools, f.ToolChoice); err != nil {
		return p, err
	}
	var rendered strings.Builder
	system, err := systemText(f.System)
	if err != nil {
		return p, err
	}
	if system != "" {
		rendered.WriteString("system: " + system + "\n")
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
	var pick textPicker
	anyUser := false
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
		if role != "user" && role != "assistant" {
			return p, badRequest("invalid_value", param+".role", "%s.role: must be \"user\" or \"assistant\", got %s (the system prompt goes in the top-level system field)", param, clip(role))
		}
		texts, own, err := messageBlocks(m.Content, param+".content", role)
		if err != nil {
			return p, err
		}
		rendered.WriteString(role + ": " + strings.Join(texts, "") + "\n")
		if role == "user" {
			anyUser = true
			pick.user(own, param+".content")
			if len(texts) > len(own) {
				pick.toolOutput(texts, param+".content")
			}
		}
	}
	if !anyUser {
		return p, badRequest("no_user_message", "messages", "messages: no user turn to classify")
	}
	if p.text, err = pick.input(lim, nil); err != nil {
		return p, err
	}
	p.prompt = rendered.String()
	return p, nil
}

// messageBlocks checks a turn's content (a string or an array of content blocks) and returns
// its text pieces in order (text blocks, and in a user turn the text of tool results), and
// own, the text blocks alone.
func messageBlocks(raw json.RawMessage, param, role string) (texts, own []string, err error) {
	if !present(raw) {
		return nil, nil, badRequest("missing_field", param, "%s: required", param)
	}
	switch raw[0] {
	case '"':
		s, err := stringField(raw, param)
		if err != nil || s == "" {
			return nil, nil, err
		}
		return []string{s}, []string{s}, nil
	case '[':
	default:
		return nil, nil, badRequest("invalid_type", param, "%s: must be a string or an array of content blocks, got %s", param, jsonKind(raw))
	}
	items, err := arrayItems(raw, param)
	if err != nil {
		return nil, nil, err
	}
	for j, item := range items {
		pp := fmt.Sprintf("%s[%d]", param, j)
		if item[0] != '{' {
			return nil, nil, badRequest("invalid_type", pp, "%s: must be a content block object, got %s", pp, jsonKind(item))
		}
		var b struct{ Type, Text, ID, Name, Input, ToolUseID, Content, Source, IsError json.RawMessage }
		if err := objectFields(item, pp+".", false, false, map[string]*json.RawMessage{"type": &b.Type, "text": &b.Text,
			"id": &b.ID, "name": &b.Name, "input": &b.Input, "tool_use_id": &b.ToolUseID, "content": &b.Content,
			"source": &b.Source, "is_error": &b.IsError}); err != nil {
			return nil, nil, err
		}
		typ, err := stringField(b.Type, pp+".type")
		if err != nil {
			return nil, nil, err
		}
		if err := blockFieldTypes(b.Text, b.ID, b.Name, b.ToolUseID, b.IsError, b.Source, pp); err != nil {
			return nil, nil, err
		}
		switch typ {
		case "text":
			t, err := stringField(b.Text, pp+".text")
			if err != nil {
				return nil, nil, err
			}
			if t != "" {
				texts = append(texts, t)
				own = append(own, t)
			}
		case "image", "document":
			if err := objectField(b.Source, pp+".source", true); err != nil {
				return nil, nil, err
			}
		case "tool_use":
			if role != "assistant" {
				return nil, nil, badRequest("invalid_value", pp+".type", "%s.type: tool_use blocks belong to assistant turns", pp)
			}
			for _, f := range []struct {
				raw  json.RawMessage
				name string
			}{{b.ID, ".id"}, {b.Name, ".name"}} {
				if _, err := stringField(f.raw, pp+f.name); err != nil {
					return nil, nil, err
				}
			}
			if err := objectField(b.Input, pp+".input", true); err != nil {
				return nil, nil, err
			}
		case "tool_result":
			if role != "user" {
				return nil, nil, badRequest("invalid_value", pp+".type", "%s.type: tool_result blocks belong to user turns", pp)
			}
			if _, err := stringField(b.ToolUseID, pp+".tool_use_id"); err != nil {
				return nil, nil, err
			}
			if _, err := optionalBool(b.IsError, pp+".is_error"); err != nil {
				return nil, nil, err
			}
			if present(b.Content) && string(b.Content) != "null" {
				result, _, err := messageBlocks(b.Content, pp+".content", "tool_result")
				if err != nil {
					return nil, nil, err
				}
				texts = append(texts, result...)
			}
		}
		// Other blocks (thinking, redacted_thinking, search results, server tools) are the
		// replica's to check: they carry nothing to classify.
	}
	return texts, own, nil
}

// blockFieldTypes checks that a content block's fields have the types a translation for a
// chat-only pool reads them as (translate.MessagesToChat reads every block's text, id, name,
// tool_use_id, is_error and source, whatever the block's type), where given and not null: a
// body is then valid or not whichever pool it reaches. The source's own fields are checked
// as a block's are (a case variant of one is a 400).
func blockFieldTypes(text, id, name, toolUseID, isError, source json.RawMessage, pp string) error {
	if err := nullableStrings(pp+".", namedRaw{"text", text}, namedRaw{"id", id}, namedRaw{"name", name}, namedRaw{"tool_use_id", toolUseID}); err != nil {
		return err
	}
	if _, err := optionalBool(isError, pp+".is_error"); err != nil {
		return err
	}
	if err := objectField(source, pp+".source", false); err != nil || !present(source) || string(source) == "null" {
		return err
	}
	var src struct{ Type, MediaType, Data, URL json.RawMessage }
	if err := objectFields(source, pp+".source.", false, false, map[string]*json.RawMessage{"type": &src.Type,
		"media_type": &src.MediaType, "data": &src.Data, "url": &src.URL}); err != nil {
		return err
	}
	return nullableStrings(pp+".source.", namedRaw{"type", src.Type}, namedRaw{"media_type", src.MediaType}, namedRaw{"data", src.Data}, namedRaw{"url", src.URL})
}

// namedRaw is a field's name and its raw value.
type namedRaw struct {
	name string
	raw  json.RawMessage
}

// nullableStrings checks that each field given and not null is a string; within prefixes the
// names in errors. It reads only each value's first byte (objectFields has validated them), so
// a text checked here and read later is not unescaped twice.
func nullableStrings(within string, fields ...namedRaw) error {
	for _, f := range fields {
		if present(f.raw) && string(f.raw) != "null" && f.raw[0] != '"' {
			return badRequest("invalid_type", within+f.name, "%s%s: must be a string, got %s", within, f.name, jsonKind(f.raw))
		}
	}
	return nil
}

// systemText checks the system prompt (a string or an array of text blocks) and returns its text.
func systemText(raw json.RawMessage) (string, error) {
	if !present(raw) || string(raw) == "null" {
		return "", nil
	}
	if raw[0] == '"' {
		return stringField(raw, "system")
	}
	if raw[0] != '[' {
		return "", badRequest("invalid_type", "system", "system: must be a string or an array of text blocks, got %s", jsonKind(raw))
	}
	blocks, err := arrayItems(raw, "system")
	if err != nil {
		return "", err
	}
	var texts []string
	for i, item := range blocks {
		pp := fmt.Sprintf("system[%d]", i)
		if item[0] != '{' {
			return "", badRequest("invalid_type", pp, "%s: must be a text block object, got %s", pp, jsonKind(item))
		}
		var b struct{ Type, Text, ID, Name, ToolUseID, IsError, Source json.RawMessage }
		if err := objectFields(item, pp+".", false, false, map[string]*json.RawMessage{"type": &b.Type, "text": &b.Text,
			"id": &b.ID, "name": &b.Name, "tool_use_id": &b.ToolUseID, "is_error": &b.IsError, "source": &b.Source}); err != nil {
			return "", err
		}
		typ, err := stringField(b.Type, pp+".type")
		if err != nil {
			return "", err
		}
		if err := blockFieldTypes(b.Text, b.ID, b.Name, b.ToolUseID, b.IsError, b.Source, pp); err != nil {
			return "", err // the translation reads system blocks as content blocks
		}
		if typ != "text" {
			return "", badRequest("invalid_value", pp+".type", "%s.type: must be \"text\", got %s", pp, clip(typ))
		}
		t, err := stringField(b.Text, pp+".text")
		if err != nil {
			return "", err
		}
		texts = append(texts, t)
	}
	return strings.Join(texts, "\n"), nil
}

// messagesTools checks tools (name and, for client tools, input_schema) and tool_choice.
func messagesTools(tools, choice json.RawMessage) error {
	if present(tools) && string(tools) != "null" {
		if tools[0] != '[' {
			return badRequest("invalid_type", "tools", "tools: must be an array, got %s", jsonKind(tools))
		}
		items, err := arrayItems(tools, "tools")
		if err != nil {
			return err
		}
		for i, item := range items {
			pp := fmt.Sprintf("tools[%d]", i)
			if item[0] != '{' {
				return badRequest("invalid_type", pp, "%s: must be a tool object, got %s", pp, jsonKind(item))
			}
			var t struct{ Name, Type, InputSchema, Description json.RawMessage }
			if err := objectFields(item, pp+".", false, false, map[string]*json.RawMessage{"name": &t.Name, "type": &t.Type,
				"input_schema": &t.InputSchema, "description": &t.Description}); err != nil {
				return err
			}
			if _, err := stringField(t.Name, pp+".name"); err != nil {
				return err
			}
			if err := nullableStrings(pp+".", namedRaw{"description", t.Description}); err != nil {
				return err // a chat-only pool's translation reads it as a string
			}
			typ, err := optionalString(t.Type, pp+".type")
			if err != nil {
				return err
			}
			if typ == "" || typ == "custom" { // server tools ("web_search_20250305") have no schema
				if err := objectField(t.InputSchema, pp+".input_schema", true); err != nil {
					return err
				}
			}
		}
	}
	if !present(choice) || string(choice) == "null" {
		return nil
	}
	if err := objectField(choice, "tool_choice", true); err != nil {
		return err
	}
	var c struct{ Type, Name, DisableParallel json.RawMessage }
	if err := objectFields(choice, "tool_choice.", false, false, map[string]*json.RawMessage{"type": &c.Type, "name": &c.Name,
		"disable_parallel_tool_use": &c.DisableParallel}); err != nil {
		return err
	}
	if _, err := optionalBool(c.DisableParallel, "tool_choice.disable_parallel_tool_use"); err != nil {
		return err // a chat-only pool's translation reads it as parallel_tool_calls
	}
	typ, err := stringField(c.Type, "tool_choice.type")
	if err != nil {
		return err
	}
	switch typ {
	case "auto", "any", "none":
	case "tool":
		if _, err := stringField(c.Name, "tool_choice.name"); err != nil {
			return err
		}
	default:
		return badRequest("invalid_value", "tool_choice.type", "tool_choice.type: must be auto, any, tool or none, got %s", clip(typ))
	}
	return nil
}

// messagesMetadata checks metadata and returns its user_id.
func messagesMetadata(raw json.RawMessage) (string, error) {
	if !present(raw) || string(raw) == "null" {
		return "", nil
	}
	if err := objectField(raw, "metadata", true); err != nil {
		return "", err
	}
	var m struct{ UserID json.RawMessage }
	if err := objectFields(raw, "metadata.", false, false, map[string]*json.RawMessage{"user_id": &m.UserID}); err != nil {
		return "", err
	}
	if !present(m.UserID) || string(m.UserID) == "null" {
		return "", nil
	}
	return stringField(m.UserID, "metadata.user_id")
}

// objectField checks that a field is a JSON object (required: present and not null).
func objectField(raw json.RawMessage, param string, required bool) error {
	if !present(raw) || string(raw) == "null" {
		if required {
			return badRequest("missing_field", param, "%s: required", param)
		}
		return nil
	}
	if raw[0] != '{' {
		return badRequest("invalid_type", param, "%s: must be an object, got %s", param, jsonKind(raw))
	}
	return nil
}

// optionalBool decodes an optional boolean; absent or null is false.
func optionalBool(raw json.RawMessage, param string) (bool, error) {
	if !present(raw) || string(raw) == "null" {
		return false, nil
	}
	var b bool
	if err := json.Unmarshal(raw, &b); err != nil {
		return false, badRequest("invalid_type", param, "%s: must be a boolean, got %s", param, jsonKind(raw))
	}
	return b, nil
}

// positiveInt checks an integer field >= 1.
func positiveInt(raw json.RawMessage, param string, required bool) error {
	if !present(raw) || string(raw) == "null" {
		if required {
			return badRequest("missing_field", param, "%s: required", param)
		}
		return nil
	}
	var n int64
	dec := json.NewDecoder(bytes.NewReader(raw))
	if jsonKind(raw) != "a number" || dec.Decode(&n) != nil {
		return badRequest("invalid_type", param, "%s: must be an integer, got %s", param, clip(string(raw)))
	}
	if n < 1 {
		return badRequest("invalid_value", param, "%s: must be >= 1, got %d", param, n)
	}
	return nil
}

// stringArray decodes an optional array of strings.
func stringArray(raw json.RawMessage, param string) ([]string, error) {
	if !present(raw) || string(raw) == "null" {
		return nil, nil
	}
	var out []string
	if raw[0] != '[' || json.Unmarshal(raw, &out) != nil {
		return nil, badRequest("invalid_type", param, "%s: must be an array of strings", param)
	}
	return out, nil
}

// responsesInput is what routing needs from an OpenAI Responses request.
type responsesInput struct {
	text     textInput
	prompt   string
	stream   bool
	model    string
	user     string
	previous string // previous_response_id
	store    bool   // store (default true): the replica keeps the response
}

// decodeResponses reads and checks a Responses request. A continuation (previous_response_id)
// is pinned, not classified, so it may carry no text; otherwise the text classified is the
// last user input: the string input, or the last user message item's text parts (the first the
// instruction, the rest its context). A function call's output after it is not: the agent's
// turn is classified by its task, as in decodeMessages; only an input with no user message is
// classified by its last output, and one whose user messages hold no text (images, files) has
// none to classify: p.text stays empty and routing.fallback places it. instructions are
// never the instruction.
func decodeResponses(body []byte, lim limits) (responsesInput, error) {
	p := responsesInput{store: true}
	if err := checkBody(body); err != nil {
		return p, err
	}
	var f struct {
		Model, Input, Instructions, PreviousResponseID, Store, Stream, User, MaxOutputTokens, Temperature, TopP json.RawMessage
	}
	if err := objectFields(body, "", false, true, map[string]*json.RawMessage{"model": &f.Model, "input": &f.Input,
		"instructions": &f.Instructions, "previous_response_id": &f.PreviousResponseID, "store": &f.Store,
		"stream": &f.Stream, "user": &f.User, "max_output_tokens": &f.MaxOutputTokens,
		"temperature": &f.Temperature, "top_p": &f.TopP}); err != nil {
		return p, err
	}
	for _, n := range []namedRaw{{"temperature", f.Temperature}, {"top_p", f.TopP}} {
		if !present(n.raw) || string(n.raw) == "null" {
			continue
		}
		if jsonKind(n.raw) != "a number" {
			return p, badRequest("invalid_type", n.name, "%s: must be a number, got %s", n.name, jsonKind(n.raw))
		}
		if _, err := strconv.ParseFloat(string(n.raw), 64); err != nil { // echoed in the answer as a float64
			return p, badRequest("invalid_value", n.name, "%s: out of range, got %s", n.name, clip(string(n.raw)))
		}
	}
	var err error
	if present(f.Model) && string(f.Model) != "null" {
		if p.model, err = stringField(f.Model, "model"); err != nil {
			return p, err
		}
	}
	if present(f.User) && string(f.User) != "null" {
		if p.user, err = stringField(f.User, "user"); err != nil {
			return p, err
		}
	}
	if present(f.PreviousResponseID) && string(f.PreviousResponseID) != "null" {
		if p.previous, err = stringField(f.PreviousResponseID, "previous_response_id"); err != nil {
			return p, err
		}
		if p.previous == "" {
			return p, badRequest("invalid_value", "previous_response_id", "previous_response_id: must not be empty")
		}
	}
	if p.stream, err = optionalBool(f.Stream, "stream"); err != nil {
		return p, err
	}
	if present(f.Store) && string(f.Store) != "null" {
		if p.store, err = optionalBool(f.Store, "store"); err != nil {
			return p, err
		}
	}
	if err := positiveInt(f.MaxOutputTokens, "max_output_tokens", false); err != nil {
		return p, err
	}
	var rendered strings.Builder
	if present(f.Instructions) && string(f.Instructions) != "null" {
		ins, err := stringField(f.Instructions, "instructions")
		if err != nil {
			return p, err
		}
		rendered.WriteString("system: " + ins + "\n")
	}
	if !present(f.Input) || string(f.Input) == "null" {
		return p, badRequest("missing_field", "input", "input: required")
	}
	var pick textPicker
	anyUser := false
	switch f.Input[0] {
	case '"':
		s, err := stringField(f.Input, "input")
		if err != nil {
			return p, err
		}
		pick.user([]string{s}, "input")
		anyUser = true
		rendered.WriteString("user: " + s + "\n")
	case '[':
		items, err := arrayItems(f.Input, "input")
		if err != nil {
			return p, err
		}
		if len(items) == 0 {
			return p, badRequest("empty_input", "input", "input: must contain at least one item")
		}
		for i, item := range items {
			pp := fmt.Sprintf("input[%d]", i)
			role, texts, isOutput, err := responseItem(item, pp)
			if err != nil {
				return p, err
			}
			rendered.WriteString(role + ": " + strings.Join(texts, "") + "\n")
			anyUser = anyUser || role == "user"
			switch {
			case isOutput:
				pick.toolOutput(texts, pp+".output")
			case role == "user":
				pick.user(texts, pp+".content")
			}
		}
	default:
		return p, badRequest("invalid_type", "input", "input: must be a string or an array of input items, got %s", jsonKind(f.Input))
	}
	p.prompt = rendered.String()
	if _, ok := pick.pick(); !ok {
		switch {
		case p.previous != "":
			return p, nil // a continuation is not classified: an agent may send an empty tool output
		case anyUser:
			return p, nil // user input of images or files alone: no text, routed by routing.fallback
		}
		return p, badRequest("no_user_message", "input", "input: no user message with text to classify")
	}
	if p.text, err = pick.input(lim, nil); err != nil {
		return p, err
	}
	return p, nil
}

// responseItem checks one input item and returns its role (a function call's output reads as
// "tool"), its text pieces and whether it is a function call's output.
func responseItem(item json.RawMessage, pp string) (role string, texts []string, output bool, err error) {
	if item[0] != '{' {
		return "", nil, false, badRequest("invalid_type", pp, "%s: must be an input item object, got %s", pp, jsonKind(item))
	}
	var it struct{ Type, Role, Content, Output, CallID json.RawMessage }
	if err := objectFields(item, pp+".", false, false, map[string]*json.RawMessage{"type": &it.Type, "role": &it.Role,
		"content": &it.Content, "output": &it.Output, "call_id": &it.CallID}); err != nil {
		return "", nil, false, err
	}
	typ, err := optionalString(it.Type, pp+".type")
	if err != nil {
		return "", nil, false, err
	}
	if err := nullableStrings(pp+".", namedRaw{"role", it.Role}); err != nil {
		return "", nil, false, err // a chat-only pool's translation reads every item's role
	}
	switch typ {
	case "", "message":
		if role, err = stringField(it.Role, pp+".role"); err != nil {
			return "", nil, false, err
		}
		switch role {
		case "user", "assistant", "system", "developer":
		default:
			return "", nil, false, badRequest("invalid_value", pp+".role", "%s.role: must be user, assistant, system or developer, got %s", pp, clip(role))
		}
		texts, err = responseContent(it.Content, pp+".content")
		return role, texts, false, err
	case "function_call_output":
		if _, err := stringField(it.CallID, pp+".call_id"); err != nil {
			return "", nil, false, err
		}
		if !present(it.Output) {
			return "", nil, false, badRequest("missing_field", pp+".output", "%s.output: required", pp)
		}
		if it.Output[0] == '"' {
			s, err := stringField(it.Output, pp+".output")
			if err != nil {
				return "", nil, false, err
			}
			if s != "" {
				texts = []string{s}
			}
		} else if texts, err = responseContent(it.Output, pp+".output"); err != nil {
			return "", nil, false, err
		}
		return "tool", texts, true, nil
	}
	// function_call, reasoning, item_reference, ...: the replica's to check.
	return typ, nil, false, nil
}

// responseContent checks a message item's content (a string or an array of parts) and returns
// its text parts (input_text, output_text).
func responseContent(raw json.RawMessage, param string) ([]string, error) {
	if !present(raw) {
		return nil, badRequest("missing_field", param, "%s: required", param)
	}
	switch raw[0] {
	case '"':
		s, err := stringField(raw, param)
		if err != nil || s == "" {
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
		var part struct{ Type, Text, ImageURL json.RawMessage }
		if err := objectFields(item, pp+".", false, false, map[string]*json.RawMessage{"type": &part.Type, "text": &part.Text,
			"image_url": &part.ImageURL}); err != nil {
			return nil, err
		}
		typ, err := stringField(part.Type, pp+".type")
		if err != nil {
			return nil, err
		}
		if err := nullableStrings(pp+".", namedRaw{"text", part.Text}, namedRaw{"image_url", part.ImageURL}); err != nil {
			return nil, err // a chat-only pool's translation reads every part's text and image_url
		}
		if typ != "input_text" && typ != "output_text" {
			continue
		}
		t, err := stringField(part.Text, pp+".text")
		if err != nil {
			return nil, err
		}
		if t != "" {
			out = append(out, t)
		}
	}
	return out, nil
}
