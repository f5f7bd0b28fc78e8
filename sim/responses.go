package sim

import (
	"container/list"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
)

// The OpenAI Responses API as vLLM serves it (/v1/responses, GET and DELETE
// /v1/responses/{id}): a response stored (store, the default) can be continued by a request
// naming it in previous_response_id, on this replica only, as vLLM keeps them in its own
// memory. The store is bounded (Config-independent: maxStoredResponses); the oldest stored
// response is forgotten first.

// maxStoredResponses bounds a replica's stored responses.
const maxStoredResponses = 4096

type responsesRequestJSON struct {
	Model              string          `json:"model"`
	Input              json.RawMessage `json:"input"`
	Instructions       *string         `json:"instructions"`
	PreviousResponseID *string         `json:"previous_response_id"`
	Store              *bool           `json:"store"`
	Stream             bool            `json:"stream"`
	MaxOutputTokens    *int            `json:"max_output_tokens"`
}

// responseItem is an input item: a message (role, content as a string or input_text parts)
// or a function_call_output; others count for nothing.
type responseItem struct {
	Type    string          `json:"type"`
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	Output  string          `json:"output"`
}

// storedResponse is one response kept for previous_response_id and GET.
type storedResponse struct {
	conversation string // the rendered prompt and the answer: what a continuation starts from
	body         map[string]any
}

// responseStore is a replica's stored responses, oldest first.
type responseStore struct {
	mu    sync.Mutex
	byID  map[string]*list.Element
	order *list.List // of storeEntry
}

type storeEntry struct {
	id string
	r  *storedResponse
}

func newResponseStore() *responseStore {
	return &responseStore{byID: map[string]*list.Element{}, order: list.New()}
}

func (st *responseStore) get(id string) *storedResponse {
	st.mu.Lock()
	defer st.mu.Unlock()
	if e, ok := st.byID[id]; ok {
		return e.Value.(storeEntry).r
	}
	return nil
}

func (st *responseStore) put(id string, r *storedResponse) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.byID[id] = st.order.PushBack(storeEntry{id, r})
	for st.order.Len() > maxStoredResponses {
		old := st.order.Front()
		st.order.Remove(old)
		delete(st.byID, old.Value.(storeEntry).id)
	}
}

func (st *responseStore) remove(id string) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	e, ok := st.byID[id]
	if ok {
		st.order.Remove(e)
		delete(st.byID, id)
	}
	return ok
}

// notFound is vLLM's answer for an id it does not hold.
func responseNotFound(id string) *apiError {
	return &apiError{status: http.StatusNotFound, typ: "invalid_request_error",
		message: fmt.Sprintf("Response with id '%s' not found.", id)}
}

func (s *Server) parseResponses(body []byte, defaultModel string) (genRequest, *apiError) {
	var in responsesRequestJSON
	if e := decodeBody(body, &in); e != nil {
		return genRequest{}, e
	}
	if len(in.Input) == 0 || string(in.Input) == "null" {
		return genRequest{}, badRequest("input", "input: required")
	}
	var msgs []Message
	if in.Instructions != nil && *in.Instructions != "" {
		msgs = append(msgs, Message{Role: "system", Content: *in.Instructions})
	}
	var s1 string
	if json.Unmarshal(in.Input, &s1) == nil {
		msgs = append(msgs, Message{Role: "user", Content: s1})
	} else {
		var items []responseItem
		if err := json.Unmarshal(in.Input, &items); err != nil {
			return genRequest{}, badRequest("input", "input: expected a string or an array of input items")
		}
		for i, it := range items {
			switch {
			case it.Type == "function_call_output":
				msgs = append(msgs, Message{Role: "tool", Content: it.Output})
			case it.Type == "" || it.Type == "message":
				text, e := responseContent(it.Content, fmt.Sprintf("input[%d].content", i))
				if e != nil {
					return genRequest{}, e
				}
				msgs = append(msgs, Message{Role: it.Role, Content: text})
			}
		}
	}
	req := genRequest{kind: responsesEndpoint, model: in.Model, stream: in.Stream, store: in.Store == nil || *in.Store}
	if in.PreviousResponseID != nil {
		prev := s.responses.get(*in.PreviousResponseID)
		if prev == nil {
			return genRequest{}, responseNotFound(*in.PreviousResponseID)
		}
		req.previous = *in.PreviousResponseID
		req.prompt = prev.conversation
	}
	req.prompt += RenderChat(msgs)
	return finishParse(req, defaultModel, nil, in.MaxOutputTokens, "max_output_tokens", nil)
}

// responseContent is a message item's text: a string, or the text of its input_text (or
// output_text) parts.
func responseContent(raw json.RawMessage, param string) (string, *apiError) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", badRequest(param, "%s: expected a string or an array of content parts", param)
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type == "input_text" || p.Type == "output_text" || p.Type == "text" {
			b.WriteString(p.Text)
		}
	}
	return b.String(), nil
}

// handleResponseByID answers GET (the stored response) and DELETE on /v1/responses/{id}.
func (s *Server) handleResponseByID(w http.ResponseWriter, r *http.Request) {
	id := strings.TrimPrefix(r.URL.Path, "/v1/responses/")
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		stored := s.responses.get(id)
		if stored == nil {
			writeError(w, responseNotFound(id))
			return
		}
		writeJSON(w, http.StatusOK, stored.body)
	case http.MethodDelete:
		if !s.responses.remove(id) {
			writeError(w, responseNotFound(id))
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"id": id, "object": "response", "deleted": true})
	default:
		w.Header().Set("Allow", "GET, DELETE")
		writeError(w, &apiError{status: http.StatusMethodNotAllowed, typ: "invalid_request_error",
			message: fmt.Sprintf("method %s not allowed on %s (allowed: GET, DELETE)", r.Method, r.URL.Path)})
	}
}

func (j *job) messageItemID() string { return "msg_" + strings.TrimPrefix(j.id, "resp-") }

func (j *job) outputItem(text, status string) map[string]any {
	content := []any{}
	if status == "completed" {
		content = []any{map[string]any{"type": "output_text", "text": text, "annotations": []any{}}}
	}
	return map[string]any{"type": "message", "id": j.messageItemID(), "status": status, "role": "assistant", "content": content}
}

// responseObject is the response's body: in progress (no output, no usage) or completed.
func (j *job) responseObject(done bool) map[string]any {
	o := map[string]any{
		"id": j.id, "object": "response", "created_at": j.created, "model": j.req.model,
		"status": "in_progress", "output": []any{}, "usage": nil, "error": nil, "incomplete_details": nil,
		"instructions": nil, "metadata": map[string]any{}, "parallel_tool_calls": true, "tool_choice": "auto",
		"tools": []any{}, "store": j.req.store, "text": map[string]any{"format": map[string]string{"type": "text"}},
		"previous_response_id": nil,
	}
	if j.req.previous != "" {
		o["previous_response_id"] = j.req.previous
	}
	if done {
		o["status"] = "completed"
		o["output"] = []any{j.outputItem(GeneratedText(j.req.prompt, j.outTokens), "completed")}
		o["usage"] = map[string]any{
			"input_tokens": j.promptTokens, "input_tokens_details": map[string]int{"cached_tokens": j.cachedTokens},
			"output_tokens": j.outTokens, "output_tokens_details": map[string]int{"reasoning_tokens": 0},
			"total_tokens": j.promptTokens + j.outTokens,
		}
		if j.finish == finishLength {
			o["status"] = "incomplete"
			o["incomplete_details"] = map[string]string{"reason": "max_output_tokens"}
		}
	}
	return o
}

// finishResponse stores a completed response when the request asked to, and returns its body.
func (s *Server) finishResponse(j *job) map[string]any {
	o := j.responseObject(true)
	if j.req.store {
		text := GeneratedText(j.req.prompt, j.outTokens)
		s.responses.put(j.id, &storedResponse{conversation: j.req.prompt + RenderChat([]Message{{Role: "assistant", Content: text}}), body: o})
	}
	return o
}

// responsesEncoder writes the Responses API's typed events, each with its sequence number.
type responsesEncoder struct {
	s    *Server
	j    *job
	seq  int
	text strings.Builder
}

func (e *responsesEncoder) event(buf []byte, typ string, fields map[string]any) []byte {
	fields["type"] = typ
	fields["sequence_number"] = e.seq
	e.seq++
	return appendNamed(buf, typ, fields)
}

func (e *responsesEncoder) start(buf []byte) []byte {
	buf = e.event(buf, "response.created", map[string]any{"response": e.j.responseObject(false)})
	buf = e.event(buf, "response.in_progress", map[string]any{"response": e.j.responseObject(false)})
	buf = e.event(buf, "response.output_item.added", map[string]any{"output_index": 0, "item": e.j.outputItem("", "in_progress")})
	return e.event(buf, "response.content_part.added", map[string]any{"item_id": e.j.messageItemID(), "output_index": 0,
		"content_index": 0, "part": map[string]any{"type": "output_text", "text": "", "annotations": []any{}}})
}

func (e *responsesEncoder) token(buf []byte, _ int, text string) []byte {
	e.text.WriteString(text)
	return e.event(buf, "response.output_text.delta", map[string]any{"item_id": e.j.messageItemID(), "output_index": 0,
		"content_index": 0, "delta": text, "logprobs": []any{}})
}

func (e *responsesEncoder) end(buf []byte) []byte {
	text := e.text.String()
	id := e.j.messageItemID()
	buf = e.event(buf, "response.output_text.done", map[string]any{"item_id": id, "output_index": 0, "content_index": 0,
		"text": text, "logprobs": []any{}})
	buf = e.event(buf, "response.content_part.done", map[string]any{"item_id": id, "output_index": 0, "content_index": 0,
		"part": map[string]any{"type": "output_text", "text": text, "annotations": []any{}}})
	buf = e.event(buf, "response.output_item.done", map[string]any{"output_index": 0, "item": e.j.outputItem(text, "completed")})
	return e.event(buf, "response.completed", map[string]any{"response": e.s.finishResponse(e.j)})
}
