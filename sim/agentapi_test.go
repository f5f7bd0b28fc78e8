package sim

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// sseEvents splits an SSE body into (event name, data) pairs.
func sseEvents(t *testing.T, body []byte) (names []string, data []map[string]any) {
	t.Helper()
	for block := range strings.SplitSeq(strings.TrimSpace(string(body)), "\n\n") {
		var name, payload string
		for line := range strings.SplitSeq(block, "\n") {
			if v, ok := strings.CutPrefix(line, "event: "); ok {
				name = v
			} else if v, ok := strings.CutPrefix(line, "data: "); ok {
				payload = v
			}
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(payload), &m), payload)
		require.Equal(t, name, m["type"], "the event name is the data's type")
		names, data = append(names, name), append(data, m)
	}
	return names, data
}

func TestMessages(t *testing.T) {
	_, base := start(t, zeroLatency(), Options{Clock: newInstantClock()})
	prompt := RenderChat([]Message{{Role: "system", Content: "Be terse."}, {Role: "user", Content: "Name a colour."}})
	body := `{"model":"m","max_tokens":4,"system":"Be terse.","messages":[{"role":"user","content":[{"type":"text","text":"Name a colour."}]}]}`

	resp, b := post(t, base+"/v1/messages", body)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	var m anthropicMessage
	require.NoError(t, json.Unmarshal(b, &m))
	require.Equal(t, "message", m.Type)
	require.True(t, strings.HasPrefix(m.ID, "msg-"))
	require.Equal(t, GeneratedText(prompt, 4), m.Content[0]["text"])
	require.Equal(t, "max_tokens", *m.StopReason)
	require.Equal(t, anthropicUsage{InputTokens: CountTokens(prompt), OutputTokens: 4}, m.Usage)

	resp, b = post(t, base+"/v1/messages", strings.Replace(body, `"max_tokens":4`, `"max_tokens":3,"stream":true`, 1))
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	names, data := sseEvents(t, b)
	require.Equal(t, []string{"message_start", "content_block_start", "ping", "content_block_delta", "content_block_delta",
		"content_block_delta", "content_block_stop", "message_delta", "message_stop"}, names)
	require.Equal(t, "max_tokens", data[7]["delta"].(map[string]any)["stop_reason"])
	require.EqualValues(t, 3, data[7]["usage"].(map[string]any)["output_tokens"])

	resp, b = post(t, base+"/v1/messages/count_tokens", `{"model":"m","system":"Be terse.","messages":[{"role":"user","content":"Name a colour."}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	require.JSONEq(t, `{"input_tokens":`+mustJSON(t, CountTokens(prompt))+`}`, string(b))

	resp, b = post(t, base+"/v1/messages", `{"model":"m","messages":[{"role":"user","content":"x"}]}`)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.JSONEq(t, `{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: required"}}`, string(b))
}

func TestMessagesToolUseRoundTrip(t *testing.T) {
	_, base := start(t, zeroLatency(), Options{Clock: newInstantClock()})
	tools := `"tools":[{"name":"get_weather","input_schema":{"type":"object"}}]`
	resp, b := post(t, base+"/v1/messages", `{"model":"m","max_tokens":5,`+tools+`,"messages":[{"role":"user","content":"Weather in Oslo?"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	var m anthropicMessage
	require.NoError(t, json.Unmarshal(b, &m))
	require.Equal(t, "tool_use", *m.StopReason)
	require.Equal(t, "get_weather", m.Content[0]["name"])
	id := m.Content[0]["id"].(string)

	next := `{"model":"m","max_tokens":5,` + tools + `,"messages":[{"role":"user","content":"Weather in Oslo?"},` +
		`{"role":"assistant","content":[{"type":"tool_use","id":"` + id + `","name":"get_weather","input":{}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"` + id + `","content":"sunny"}]}]}`
	resp, b = post(t, base+"/v1/messages", next)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	require.NoError(t, json.Unmarshal(b, &m))
	require.Equal(t, "max_tokens", *m.StopReason, "a tool's result is answered in text")
	require.Equal(t, "text", m.Content[0]["type"])
}

func TestResponsesChainGetDelete(t *testing.T) {
	_, base := start(t, zeroLatency(), Options{Clock: newInstantClock()})
	resp, b := post(t, base+"/v1/responses", `{"model":"m","input":"Hello","max_output_tokens":3}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	first := jsonBody(t, b)
	id := first["id"].(string)
	require.Equal(t, "response", first["object"])

	resp, b = post(t, base+"/v1/responses", `{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"And?"}]}],"previous_response_id":"`+id+`","stream":true,"max_output_tokens":2}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	names, data := sseEvents(t, b)
	require.Equal(t, []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
		"response.output_text.delta", "response.output_text.delta", "response.output_text.done", "response.content_part.done",
		"response.output_item.done", "response.completed"}, names)
	done := data[len(data)-1]["response"].(map[string]any)
	require.Equal(t, id, done["previous_response_id"])
	prompt := "user: Hello\nassistant: " + GeneratedText("user: Hello\n", 3) + "\nuser: And?\n"
	require.EqualValues(t, CountTokens(prompt), done["usage"].(map[string]any)["input_tokens"], "the continuation carries the conversation")

	resp, b = get(t, base+"/v1/responses/"+id)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	require.Equal(t, id, jsonBody(t, b)["id"])
	req, _ := http.NewRequest(http.MethodDelete, base+"/v1/responses/"+id, nil)
	dr, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	dr.Body.Close()
	require.Equal(t, http.StatusOK, dr.StatusCode)
	resp, b = get(t, base+"/v1/responses/"+id)
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	require.Contains(t, string(b), "Response with id '"+id+"' not found.")
	resp, b = post(t, base+"/v1/responses", `{"input":"x","previous_response_id":"resp-nope"}`)
	require.Equal(t, http.StatusNotFound, resp.StatusCode, string(b))
}

func TestResponseStoreIsBounded(t *testing.T) {
	st := newResponseStore()
	for i := range maxStoredResponses + 2 {
		st.put(mustJSON(t, i), &storedResponse{})
	}
	require.Nil(t, st.get("0"), "the oldest is forgotten first")
	require.Nil(t, st.get("1"))
	require.NotNil(t, st.get(mustJSON(t, maxStoredResponses+1)))
	require.Equal(t, maxStoredResponses, st.order.Len())
}

func TestChatToolCalls(t *testing.T) {
	_, base := start(t, zeroLatency(), Options{Clock: newInstantClock()})
	tools := `"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]`
	resp, b := post(t, base+"/v1/chat/completions", `{"max_tokens":3,`+tools+`,"messages":[{"role":"user","content":"Weather?"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	var c struct {
		Choices []struct {
			Message struct {
				Content   *string
				ToolCalls []struct {
					ID       string
					Function struct{ Name, Arguments string }
				} `json:"tool_calls"`
			}
			FinishReason string `json:"finish_reason"`
		}
	}
	require.NoError(t, json.Unmarshal(b, &c))
	require.Equal(t, "tool_calls", c.Choices[0].FinishReason)
	require.Nil(t, c.Choices[0].Message.Content)
	call := c.Choices[0].Message.ToolCalls[0]
	require.Equal(t, "get_weather", call.Function.Name)
	require.True(t, json.Valid([]byte(call.Function.Arguments)))

	resp, b = post(t, base+"/v1/chat/completions", `{"max_tokens":3,"stream":true,`+tools+`,"messages":[{"role":"user","content":"Weather?"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	require.Contains(t, string(b), `"tool_calls":[{"function":{"arguments":`)
	require.Contains(t, string(b), `"finish_reason":"tool_calls"`)
	require.Equal(t, 3, strings.Count(string(b), "data: "), "the call, the finish, [DONE]")

	next := `{"max_tokens":3,` + tools + `,"messages":[{"role":"user","content":"Weather?"},` +
		`{"role":"assistant","content":null,"tool_calls":[{"id":"` + call.ID + `","type":"function","function":{"name":"get_weather","arguments":"{}"}}]},` +
		`{"role":"tool","tool_call_id":"` + call.ID + `","content":"sunny"}]}`
	resp, b = post(t, base+"/v1/chat/completions", next)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	require.NoError(t, json.Unmarshal(b, &c))
	require.Equal(t, "length", c.Choices[0].FinishReason, "a tool's result is answered in text")
	require.NotNil(t, c.Choices[0].Message.Content)
}
