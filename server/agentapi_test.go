package server

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/internal/testnet"
	"github.com/triage-gw/triage/router"
	"github.com/triage-gw/triage/upstream"
)

// simServer runs a gateway whose pools are sim replicas (fast: n of them) and a fake model.
func simServer(t *testing.T, fastReplicas int, edit func(*gatewayConfig)) (string, *fakeModel, *Server) {
	t.Helper()
	var fast []string
	for i := range fastReplicas {
		fast = append(fast, simUpstream(t, fmt.Sprintf("sim-fast-%d", i), "mock-fast"))
	}
	cfg := testConfig(fast, []string{simUpstream(t, "sim-slow", "mock-slow")})
	cfg.Pools.Fast.Model, cfg.Pools.Slow.Model = "mock-fast", "mock-slow"
	if edit != nil {
		edit(&cfg)
	}
	model := newFakeModel("v1")
	s, url, _ := run(t, cfg, testOptions{load: func() (router.Model, error) { return model, nil }})
	return url, model, s
}

// sseNames returns the event names of an SSE body, and each event's data decoded.
func sseNames(t *testing.T, body []byte) (names []string, data []map[string]any) {
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
		names, data = append(names, name), append(data, m)
	}
	return names, data
}

// anthropicErr decodes a Messages error body, failing the test if it is not one.
func anthropicErr(t *testing.T, body []byte) (typ, message string) {
	t.Helper()
	var e struct {
		Type  string `json:"type"`
		Error *struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal(body, &e), "error body must be JSON: %s", body)
	require.Equal(t, "error", e.Type, "%s", body)
	require.NotNil(t, e.Error, "%s", body)
	require.NotEmpty(t, e.Error.Message)
	return e.Error.Type, e.Error.Message
}

func TestMessagesRoutedLikeChat(t *testing.T) {
	url, model, _ := simServer(t, 1, nil)
	body := `{"model":"auto","max_tokens":4,"system":"never classify me","messages":[` +
		`{"role":"user","content":"first turn"},{"role":"assistant","content":"ok"},` +
		`{"role":"user","content":[{"type":"text","text":"write an epic p=0.9"},{"type":"text","text":"the document"}]}]}`
	resp, b := postJSON(t, url+"/v1/messages", body, "anthropic-version", "2023-06-01")
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	require.Equal(t, "slow", resp.Header.Get(HeaderPath))
	require.Equal(t, "slow_granted", resp.Header.Get(HeaderReason))
	require.Equal(t, "slow-0", resp.Header.Get(HeaderReplica))
	require.NotEmpty(t, resp.Header.Get(HeaderPSlow))
	require.NotEmpty(t, resp.Header.Get(HeaderLatency))
	require.Empty(t, resp.Header.Get(HeaderTranslated), "the sim speaks Messages natively")
	require.Contains(t, model.seen(), "write an epic p=0.9 [SEP] the document", "the last user turn, its later blocks the context")
	var m struct {
		StopReason string `json:"stop_reason"`
		Content    []map[string]any
		Usage      map[string]int
	}
	require.NoError(t, json.Unmarshal(b, &m))
	require.Equal(t, "max_tokens", m.StopReason)
	require.Equal(t, "text", m.Content[0]["type"])
	require.Equal(t, 4, m.Usage["output_tokens"])
	require.Equal(t, resp.Header.Get(HeaderCompletionTokens), "4", "tokens are counted as for chat")
	require.Equal(t, fmt.Sprint(m.Usage["input_tokens"]+m.Usage["cache_read_input_tokens"]), resp.Header.Get(HeaderPromptTokens))

	// Streamed: the replica's named events pass through.
	resp, b = postJSON(t, url+"/v1/messages", strings.Replace(body, `"max_tokens":4`, `"max_tokens":2,"stream":true`, 1))
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	names, _ := sseNames(t, b)
	require.Equal(t, []string{"message_start", "content_block_start", "ping", "content_block_delta", "content_block_delta",
		"content_block_stop", "message_delta", "message_stop"}, names)

	// An agent's turn that only returns a tool's output is classified by its task, as a chat
	// completion's tool messages are: the task's text again (a cache hit), the task's pool.
	task := `{"role":"user","content":"fix the build p=0.9"}`
	resp, b = postJSON(t, url+"/v1/messages", `{"max_tokens":2,"messages":[`+task+`]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	require.Equal(t, "slow", resp.Header.Get(HeaderPath))
	toolTurn := func(text string) string {
		return `{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}}]},` +
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"` + text + `"}]}]}`
	}
	resp, b = postJSON(t, url+"/v1/messages", `{"max_tokens":2,"messages":[`+task+`,`+toolTurn("tool says p=0.2")+`]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	require.Equal(t, "slow", resp.Header.Get(HeaderPath), "the task's pool, not the tool output's")
	require.Equal(t, "hit", resp.Header.Get(HeaderCache))
	require.NotContains(t, model.seen(), "tool says p=0.2")

	// Text of the user's own beside the tool result is the turn's instruction.
	resp, b = postJSON(t, url+"/v1/messages", `{"max_tokens":2,"messages":[`+task+`,`+
		`{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}}]},`+
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"tool says p=0.9"},{"type":"text","text":"now the docs p=0.2"}]}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	require.Equal(t, "fast", resp.Header.Get(HeaderPath))
	require.Contains(t, model.seen(), "now the docs p=0.2")
	require.NotContains(t, model.seen(), "tool says p=0.9")

	// A conversation with no user text at all is classified by its last tool output.
	resp, b = postJSON(t, url+"/v1/messages", `{"max_tokens":2,"messages":[`+toolTurn("tool says p=0.1")+`]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	require.Equal(t, "fast", resp.Header.Get(HeaderPath))
	require.Contains(t, model.seen(), "tool says p=0.1")
}

func TestMessagesCountTokens(t *testing.T) {
	url, _, _ := simServer(t, 1, func(c *gatewayConfig) { c.Pools.Slow.APIs = []string{"chat"} })
	body := `{"model":"m","system":"s","messages":[{"role":"user","content":"count me p=0.1"}]}`
	resp, b := postJSON(t, url+"/v1/messages/count_tokens", body)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	require.Equal(t, "replica", resp.Header.Get(HeaderTokenCount))
	require.Equal(t, "fast", resp.Header.Get(HeaderPath))
	var n countTokens
	require.NoError(t, json.Unmarshal(b, &n))
	require.Positive(t, n.InputTokens)

	resp, b = postJSON(t, url+"/v1/messages/count_tokens", strings.Replace(body, "p=0.1", "p=0.9", 1))
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	require.Equal(t, "slow", resp.Header.Get(HeaderPath))
	require.Equal(t, "estimate", resp.Header.Get(HeaderTokenCount), "a chat-only pool cannot count: estimated")
}

func TestMessagesToolUseRoundTrip(t *testing.T) {
	url, _, _ := simServer(t, 1, nil)
	tools := `"tools":[{"name":"get_weather","description":"d","input_schema":{"type":"object"}}]`
	resp, b := postJSON(t, url+"/v1/messages", `{"max_tokens":3,`+tools+`,"messages":[{"role":"user","content":"Weather in Oslo?"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	var m struct {
		StopReason string           `json:"stop_reason"`
		Content    []map[string]any `json:"content"`
	}
	require.NoError(t, json.Unmarshal(b, &m))
	require.Equal(t, "tool_use", m.StopReason)
	call := m.Content[0]
	next := fmt.Sprintf(`{"max_tokens":3,%s,"messages":[{"role":"user","content":"Weather in Oslo?"},`+
		`{"role":"assistant","content":[{"type":"tool_use","id":%q,"name":%q,"input":{}}]},`+
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":%q,"content":"sunny"}]}]}`, tools, call["id"], call["name"], call["id"])
	resp, b = postJSON(t, url+"/v1/messages", next)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	require.NoError(t, json.Unmarshal(b, &m))
	require.Equal(t, "max_tokens", m.StopReason)
	require.Equal(t, "text", m.Content[0]["type"])
}

// TestMessagesTranslatedToChat: a pool without the Messages API gets a chat completion, tool
// use included, and the client a message.
func TestMessagesTranslatedToChat(t *testing.T) {
	ts := startServer(t, func(c *gatewayConfig, _ *testOptions) { c.Pools.Fast.APIs = []string{"chat", "completions"} })
	ts.fast.onGenerate = func(w http.ResponseWriter, r *http.Request, body []byte) {
		w.Header().Set("Content-Type", "application/json")
		if strings.Contains(string(body), `"role":"tool"`) {
			io.WriteString(w, `{"id":"c2","model":"model-fast","choices":[{"index":0,"message":{"role":"assistant","content":"Sunny."},"finish_reason":"stop"}],"usage":{"prompt_tokens":20,"completion_tokens":2}}`)
			return
		}
		io.WriteString(w, `{"id":"c1","model":"model-fast","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\"}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":12,"completion_tokens":5}}`)
	}
	tools := `"tools":[{"name":"get_weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}}]`
	resp, b := postJSON(t, ts.url+"/v1/messages", `{"model":"auto","max_tokens":10,"system":"sys",`+tools+`,"messages":[{"role":"user","content":"Weather? p=0.1"}]}`,
		"x-api-key", "never-forwarded", "anthropic-version", "2023-06-01")
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	require.Equal(t, "chat", resp.Header.Get(HeaderTranslated))
	require.Equal(t, "12", resp.Header.Get(HeaderPromptTokens))
	require.JSONEq(t, `{"id":"msg_c1","type":"message","role":"assistant","model":"model-fast",
		"content":[{"type":"tool_use","id":"call_1","name":"get_weather","input":{"city":"Oslo"}}],
		"stop_reason":"tool_use","stop_sequence":null,
		"usage":{"input_tokens":12,"output_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}`, string(b))
	got := ts.fast.requests()[0]
	require.Equal(t, "/v1/chat/completions", got.path)
	require.Equal(t, "model-fast", got.body["model"])
	require.Equal(t, []any{map[string]any{"role": "system", "content": "sys"}, map[string]any{"role": "user", "content": "Weather? p=0.1"}}, got.body["messages"])
	require.Equal(t, "get_weather", got.body["tools"].([]any)[0].(map[string]any)["function"].(map[string]any)["name"])
	require.Empty(t, got.header.Get("X-Api-Key"), "the client's key stays at the gateway")

	resp, b = postJSON(t, ts.url+"/v1/messages", `{"max_tokens":10,`+tools+`,"messages":[{"role":"user","content":"Weather? p=0.1"},`+
		`{"role":"assistant","content":[{"type":"tool_use","id":"call_1","name":"get_weather","input":{"city":"Oslo"}}]},`+
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"call_1","content":"sunny p=0.1"}]}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	require.Contains(t, string(b), `"text":"Sunny."`)
	msgs := ts.fast.requests()[1].body["messages"].([]any)
	require.Equal(t, map[string]any{"role": "tool", "tool_call_id": "call_1", "content": "sunny p=0.1"}, msgs[2])

	// An error of the chat replica reaches the client in the Messages shape.
	ts.fast.onGenerate = func(w http.ResponseWriter, r *http.Request, body []byte) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"error":{"message":"max_tokens is too large","type":"BadRequestError"}}`)
	}
	resp, b = postJSON(t, ts.url+"/v1/messages", `{"max_tokens":999999,"messages":[{"role":"user","content":"x p=0.1"}]}`)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	typ, msg := anthropicErr(t, b)
	require.Equal(t, "invalid_request_error", typ)
	require.Equal(t, "max_tokens is too large", msg)
}

// TestUntranslatableChatAnswerIs502 gives a chat-only pool a 200 that is not a chat answer:
// both agent APIs answer 502 upstream_invalid_answer naming the replica, never a half-built
// message or response.
func TestUntranslatableChatAnswerIs502(t *testing.T) {
	ts := startServer(t, func(c *gatewayConfig, _ *testOptions) { c.Pools.Fast.APIs = []string{"chat", "completions"} })
	ts.fast.onGenerate = func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"choices":"not a list"}`)
	}
	for _, c := range []struct{ path, body, what string }{
		{"/v1/messages", `{"max_tokens":5,"messages":[{"role":"user","content":"hi p=0.1"}]}`, "message"},
		{"/v1/responses", `{"input":"hi p=0.1"}`, "response"},
	} {
		resp, b := postJSON(t, ts.url+c.path, c.body)
		require.Equal(t, http.StatusBadGateway, resp.StatusCode, c.path+": "+string(b))
		require.Contains(t, string(b), "could not be translated to a "+c.what, c.path)
		require.Contains(t, string(b), "upstream fast/", c.path)
	}
}

func TestMessagesStreamTranslatedFromSimChat(t *testing.T) {
	url, _, _ := simServer(t, 1, func(c *gatewayConfig) { c.Pools.Fast.APIs = []string{"chat"} })
	resp, b := postJSON(t, url+"/v1/messages", `{"max_tokens":3,"stream":true,"messages":[{"role":"user","content":"hello p=0.1"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	require.Equal(t, "chat", resp.Header.Get(HeaderTranslated))
	names, data := sseNames(t, b)
	require.Equal(t, []string{"message_start", "ping", "content_block_start", "content_block_delta", "content_block_delta",
		"content_block_delta", "content_block_stop", "message_delta", "message_stop"}, names)
	delta := data[7]
	require.Equal(t, "max_tokens", delta["delta"].(map[string]any)["stop_reason"])
	require.EqualValues(t, 3, delta["usage"].(map[string]any)["output_tokens"], "the usage chunk the gateway asked for")
	require.Positive(t, delta["usage"].(map[string]any)["input_tokens"])
}

// TestResponsesChainStaysOnItsReplica: a three-turn previous_response_id chain over a pool of
// two replicas picked round-robin (so a turn sent anywhere else would land on the other one,
// which answers 404): every turn reaches the replica that stored the previous one and
// succeeds, streamed turns included; GET and DELETE by id too.
func TestResponsesChainStaysOnItsReplica(t *testing.T) {
	url, model, _ := simServer(t, 2, func(c *gatewayConfig) { c.Pools.Fast.Policy.Name = "round-robin" })
	homes := map[string]bool{}
	post := func(body string) (*http.Response, []byte) {
		resp, b := postJSON(t, url+"/v1/responses", body)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
		return resp, b
	}
	for chain := range 2 { // the chains start on different replicas
		resp, b := post(`{"model":"auto","input":"Tell me a story p=0.1","max_output_tokens":3}`)
		home := resp.Header.Get(HeaderReplica)
		homes[home] = true
		var r1 struct{ ID string }
		require.NoError(t, json.Unmarshal(b, &r1))

		resp, b = post(`{"input":[{"role":"user","content":[{"type":"input_text","text":"go on p=0.9"}]}],"previous_response_id":"` + r1.ID + `","stream":true}`)
		require.Equal(t, home, resp.Header.Get(HeaderReplica), "chain %d turn 2", chain)
		require.Equal(t, "previous_response_id", resp.Header.Get(HeaderAffinity))
		require.Equal(t, "fast", resp.Header.Get(HeaderPath), "pinned to its first turn's pool, whatever the text says")
		require.Equal(t, "pinned", resp.Header.Get(HeaderReason))
		names, data := sseNames(t, b)
		require.Equal(t, "response.created", names[0])
		require.Equal(t, "response.completed", names[len(names)-1])
		id2 := data[0]["response"].(map[string]any)["id"].(string)

		resp, b = post(`{"input":"and the end","previous_response_id":"` + id2 + `","max_output_tokens":2}`)
		require.Equal(t, home, resp.Header.Get(HeaderReplica), "chain %d turn 3", chain)
		var r3 struct {
			ID                 string
			PreviousResponseID string `json:"previous_response_id"`
		}
		require.NoError(t, json.Unmarshal(b, &r3))
		require.Equal(t, id2, r3.PreviousResponseID)

		resp, b = do(t, http.MethodGet, url+"/v1/responses/"+r3.ID, "", nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
		require.Equal(t, home, resp.Header.Get(HeaderReplica))
		resp, b = do(t, http.MethodDelete, url+"/v1/responses/"+r3.ID, "", nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
		resp, b = do(t, http.MethodGet, url+"/v1/responses/"+r3.ID, "", nil)
		require.Equal(t, http.StatusNotFound, resp.StatusCode)
		require.Equal(t, "response_not_found", *apiErr(t, b).Code)
	}
	require.Len(t, homes, 2, "round-robin started the chains on both replicas")
	require.NotContains(t, model.seen(), "go on p=0.9", "a continuation is not classified: it is pinned")
}

func TestResponsesHomeReplicaDown(t *testing.T) {
	fast0 := simUpstream(t, "sim-fast-0", "mock-fast")
	downSrv := newFakeUpstream(t) // answers /health only: its replica dies below
	cfg := testConfig([]string{fast0, downSrv.srv.URL}, []string{simUpstream(t, "sim-slow", "mock-slow")})
	cfg.Pools.Fast.PassiveEjection.ConsecutiveFailures = 1
	model := newFakeModel("v1")
	s, url, _ := run(t, cfg, testOptions{load: func() (router.Model, error) { return model, nil }})
	s.responses.Put("resp-on-1", responseHome{Pool: "fast", Replica: "fast-1"})
	s.responses.Put("resp-gone", responseHome{Pool: "fast", Replica: "fast-9"})
	downSrv.srv.Close()
	testnet.HoldPort(t, downSrv.srv.Listener.Addr().String())

	// The first try meets a refused connection (nothing sent), the second an ejected replica:
	// the same answer both times, naming the replica, never another replica's.
	body := `{"input":"more","previous_response_id":"resp-on-1"}`
	for try := 1; try <= 2; try++ {
		resp, b := postJSON(t, url+"/v1/responses", body)
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "try %d: %s", try, b)
		require.Equal(t, "fast-1", resp.Header.Get(HeaderReplica))
		e := apiErr(t, b)
		require.Equal(t, "replica_unavailable", *e.Code)
		require.Contains(t, e.Message, "fast/fast-1")
		require.NotEmpty(t, resp.Header.Get("Retry-After"))
	}

	resp, b := postJSON(t, url+"/v1/responses", `{"input":"more","previous_response_id":"resp-gone"}`)
	require.Equal(t, http.StatusNotFound, resp.StatusCode, string(b))
	require.Contains(t, apiErr(t, b).Message, "no longer configured")
}

// TestResponsesTranslatedToChat: a pool without the Responses API gets a chat completion and
// the client a response, not stored; what has no chat form is refused, nothing forwarded.
func TestResponsesTranslatedToChat(t *testing.T) {
	ts := startServer(t, func(c *gatewayConfig, _ *testOptions) { c.Pools.Fast.APIs = []string{"chat", "completions"} })
	ts.fast.onGenerate = func(w http.ResponseWriter, r *http.Request, body []byte) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"chatcmpl-c1","created":5,"model":"model-fast","choices":[{"index":0,"message":{"role":"assistant","content":"Hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":2}}`)
	}
	resp, b := postJSON(t, ts.url+"/v1/responses", `{"model":"auto","instructions":"sys","input":[{"role":"user","content":"Hi p=0.1"},`+
		`{"role":"assistant","content":[{"type":"output_text","text":"Yes?"}]},{"role":"user","content":[{"type":"input_text","text":"More p=0.1"}]}],"max_output_tokens":9}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	require.Equal(t, "chat", resp.Header.Get(HeaderTranslated))
	require.Equal(t, "12", resp.Header.Get(HeaderPromptTokens))
	require.Equal(t, "fast", resp.Header.Get(HeaderPath))
	var r struct {
		ID, Object, Status string
		Store              bool
		Output             []struct {
			Content []struct{ Type, Text string }
		}
		Usage struct {
			InputTokens  int `json:"input_tokens"`
			OutputTokens int `json:"output_tokens"`
		}
	}
	require.NoError(t, json.Unmarshal(b, &r))
	require.Equal(t, "resp_c1", r.ID)
	require.Equal(t, "response", r.Object)
	require.Equal(t, "completed", r.Status)
	require.False(t, r.Store, "a chat-only replica keeps nothing")
	require.Equal(t, "Hello", r.Output[0].Content[0].Text)
	require.Equal(t, 12, r.Usage.InputTokens)
	got := ts.fast.requests()[0]
	require.Equal(t, "/v1/chat/completions", got.path)
	require.Equal(t, []any{map[string]any{"role": "system", "content": "sys"}, map[string]any{"role": "user", "content": "Hi p=0.1"},
		map[string]any{"role": "assistant", "content": "Yes?"}, map[string]any{"role": "user", "content": "More p=0.1"}}, got.body["messages"])
	require.EqualValues(t, 9, got.body["max_tokens"])

	// Not recorded: neither a continuation nor a GET finds it.
	resp, b = postJSON(t, ts.url+"/v1/responses", `{"input":"go on","previous_response_id":"resp_c1"}`)
	require.Equal(t, http.StatusNotFound, resp.StatusCode, string(b))
	require.Equal(t, "response_not_found", *apiErr(t, b).Code)

	for _, tc := range []struct{ body, param string }{
		{`{"input":"x p=0.1","tools":[{"type":"function","name":"f","parameters":{}}]}`, "tools"},
		{`{"input":[{"type":"function_call_output","call_id":"c","output":"o p=0.1"}]}`, "input[0].type"},
	} {
		resp, b := postJSON(t, ts.url+"/v1/responses", tc.body)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, string(b))
		e := apiErr(t, b)
		require.Equal(t, "api_not_supported", *e.Code)
		require.Equal(t, tc.param, *e.Param)
		require.Contains(t, e.Message, "pools.fast.apis")
	}
	require.Len(t, ts.fast.requests(), 1, "nothing refused was forwarded")

	// An error of the chat replica passes as it is: both APIs share the OpenAI error shape.
	ts.fast.onGenerate = func(w http.ResponseWriter, r *http.Request, body []byte) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"error":{"message":"max_tokens is too large","type":"BadRequestError"}}`)
	}
	resp, b = postJSON(t, ts.url+"/v1/responses", `{"input":"x p=0.1","max_output_tokens":999999}`)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Equal(t, "max_tokens is too large", apiErr(t, b).Message)
}

func TestResponsesStreamTranslatedFromSimChat(t *testing.T) {
	url, _, _ := simServer(t, 1, func(c *gatewayConfig) { c.Pools.Fast.APIs = []string{"chat", "messages"} })
	resp, b := postJSON(t, url+"/v1/responses", `{"input":"hello p=0.1","max_output_tokens":3,"stream":true}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	require.Equal(t, "chat", resp.Header.Get(HeaderTranslated))
	names, data := sseNames(t, b)
	require.Equal(t, []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
		"response.output_text.delta", "response.output_text.delta", "response.output_text.delta", "response.output_text.done",
		"response.content_part.done", "response.output_item.done", "response.completed"}, names)
	done := data[len(data)-1]["response"].(map[string]any)
	require.Equal(t, "incomplete", done["status"], "cut at max_output_tokens")
	require.EqualValues(t, 3, done["usage"].(map[string]any)["output_tokens"], "the usage chunk the gateway asked for")
	resp, b = postJSON(t, url+"/v1/responses", `{"input":"hi p=0.9"}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	require.Empty(t, resp.Header.Get(HeaderTranslated), "the slow pool speaks the API")
}

func TestAgentAPIsBadInput(t *testing.T) {
	ts := startServer(t)
	for _, tc := range []struct {
		path, body, param string
	}{
		{"/v1/messages", `{"messages":[{"role":"user","content":"x"}]}`, "max_tokens"},
		{"/v1/messages", `{"max_tokens":0,"messages":[{"role":"user","content":"x"}]}`, "max_tokens"},
		{"/v1/messages", `{"max_tokens":1.5,"messages":[{"role":"user","content":"x"}]}`, "max_tokens"},
		{"/v1/messages", `{"max_tokens":1,"messages":[]}`, "messages"},
		{"/v1/messages", `{"max_tokens":1,"messages":[{"role":"system","content":"x"}]}`, "messages[0].role"},
		{"/v1/messages", `{"max_tokens":1,"messages":[{"role":"user","content":[{"type":"text"}]}]}`, "messages[0].content[0].text"},
		{"/v1/messages", `{"max_tokens":1,"messages":[{"role":"user","content":[{"type":"tool_result"}]}]}`, "messages[0].content[0].tool_use_id"},
		{"/v1/messages", `{"max_tokens":1,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"f"}]},{"role":"user","content":"x"}]}`, "messages[0].content[0].input"},
		{"/v1/messages", `{"max_tokens":1,"messages":[{"role":"user","content":[{"type":"image","source":{"type":0}}]}]}`, "messages[0].content[0].source.type"},
		{"/v1/messages", `{"max_tokens":1,"messages":[{"role":"user","content":[{"type":"","source":{"tYpe":0}}]}]}`, "messages[0].content[0].source.type"},
		{"/v1/messages", `{"max_tokens":1,"messages":[{"role":"user","content":[{"type":"text","text":"x","id":5}]}]}`, "messages[0].content[0].id"},
		{"/v1/messages", `{"max_tokens":1,"messages":[{"role":"user","content":[{"type":"image","source":"u"}]}]}`, "messages[0].content[0].source"},
		{"/v1/messages", `{"max_tokens":1,"tools":[{"name":"f","description":5,"input_schema":{}}],"messages":[{"role":"user","content":"x"}]}`, "tools[0].description"},
		{"/v1/messages", `{"max_tokens":1,"tool_choice":{"type":"auto","Disable_parallel_tool_use":1},"messages":[{"role":"user","content":"x"}]}`, "tool_choice.disable_parallel_tool_use"},
		{"/v1/messages", `{"max_tokens":1,"system":5,"messages":[{"role":"user","content":"x"}]}`, "system"},
		{"/v1/messages", `{"max_tokens":1,"system":[{"type":"text","text":"s","Is_error":"no"}],"messages":[{"role":"user","content":"x"}]}`, "system[0].is_error"},
		{"/v1/messages", `{"max_tokens":1,"tools":[{"name":"f"}],"messages":[{"role":"user","content":"x"}]}`, "tools[0].input_schema"},
		{"/v1/messages", `{"max_tokens":1,"tool_choice":{"type":"some"},"messages":[{"role":"user","content":"x"}]}`, "tool_choice.type"},
		{"/v1/messages", `{"max_tokens":1,"stream":"yes","messages":[{"role":"user","content":"x"}]}`, "stream"},
		{"/v1/messages", `{"max_tokens":1,"messages":[{"role":"assistant","content":"x"}]}`, "messages"},
		{"/v1/messages", `{"max_tokens":1,"MESSAGES":[]}`, "messages"},
		{"/v1/messages/count_tokens", `{"messages":"x"}`, "messages"},
		{"/v1/responses", `{}`, "input"},
		{"/v1/responses", `{"input":5}`, "input"},
		{"/v1/responses", `{"input":[]}`, "input"},
		{"/v1/responses", `{"input":[{"role":"robot","content":"x"}]}`, "input[0].role"},
		{"/v1/responses", `{"input":[{"role":"user","content":[{"type":"input_text"}]}]}`, "input[0].content[0].text"},
		{"/v1/responses", `{"input":"x","temperature":"hot"}`, "temperature"},
		{"/v1/responses", `{"input":"x","top_p":1e400}`, "top_p"},
		{"/v1/responses", `{"input":[{"role":"user","content":[{"type":"input_image","image_url":5}]}]}`, "input[0].content[0].image_url"},
		{"/v1/responses", `{"input":[{"role":"user","content":[{"type":"input_image","text":5}]}]}`, "input[0].content[0].text"},
		{"/v1/responses", `{"input":[{"role":"user","content":"x"},{"type":"function_call","role":5}]}`, "input[1].role"},
		{"/v1/responses", `{"input":"x","previous_response_id":7}`, "previous_response_id"},
		{"/v1/responses", `{"input":"x","store":"no"}`, "store"},
		{"/v1/responses", `{"input":[{"type":"function_call_output","output":"o"}]}`, "input[0].call_id"},
		{"/v1/responses", `{"input":"x","previous_response_id":"resp-unknown"}`, "previous_response_id"},
	} {
		t.Run(tc.path+" "+tc.param, func(t *testing.T) {
			resp, b := postJSON(t, ts.url+tc.path, tc.body)
			require.GreaterOrEqual(t, resp.StatusCode, 400, string(b))
			require.Less(t, resp.StatusCode, 500, string(b))
			if strings.HasPrefix(tc.path, "/v1/messages") {
				typ, msg := anthropicErr(t, b)
				require.Contains(t, []string{"invalid_request_error", "not_found_error"}, typ)
				require.Contains(t, msg, tc.param)
			} else {
				require.Equal(t, tc.param, *apiErr(t, b).Param)
			}
		})
	}
	require.Empty(t, ts.fast.requests(), "nothing was forwarded")
	require.Empty(t, ts.slow.requests())

	resp, b := do(t, http.MethodGet, ts.url+"/v1/messages", "", nil)
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	anthropicErr(t, b)
	resp, b = do(t, http.MethodGet, ts.url+"/v1/responses/nope", "", nil)
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	require.Equal(t, "response_not_found", *apiErr(t, b).Code)
}

func TestMessagesErrorShape(t *testing.T) {
	for _, tc := range []struct {
		in     *apiError
		status int
		typ    string
	}{
		{badRequest("missing_field", "max_tokens", "max_tokens: required"), 400, "invalid_request_error"},
		{errMissingKey, 401, "authentication_error"},
		{&apiError{status: 404, message: "m"}, 404, "not_found_error"},
		{&apiError{status: 429, message: "m"}, 429, "rate_limit_error"},
		{&apiError{status: 502, message: "m"}, 502, "api_error"},
		{&apiError{status: 503, message: "no healthy replica"}, StatusOverloaded, "overloaded_error"},
	} {
		status, b := messagesError(tc.in)
		require.Equal(t, tc.status, status)
		typ, _ := anthropicErr(t, b)
		require.Equal(t, tc.typ, typ)
	}
}

func TestMessagesAcceptXAPIKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.yaml")
	writeKeys(t, path, "team-a="+keyA)
	ts := startServer(t, withKeys(path, 0))
	body := `{"max_tokens":1,"messages":[{"role":"user","content":"hi p=0.1"}]}`
	resp, b := postJSON(t, ts.url+"/v1/messages", body)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	typ, _ := anthropicErr(t, b)
	require.Equal(t, "authentication_error", typ)
	resp, b = postJSON(t, ts.url+"/v1/messages", body, "x-api-key", "wrong-key-0123456789abcdef")
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, string(b))
	resp, _ = postJSON(t, ts.url+"/v1/messages", body, "x-api-key", keyA)
	require.NotEqual(t, http.StatusUnauthorized, resp.StatusCode)
	resp, _ = postJSON(t, ts.url+"/v1/responses", `{"input":"hi p=0.1"}`, "Authorization", "Bearer "+keyA)
	require.NotEqual(t, http.StatusUnauthorized, resp.StatusCode)
	for _, r := range append(ts.fast.requests(), ts.slow.requests()...) {
		require.Empty(t, r.header.Get("X-Api-Key"))
		require.Empty(t, r.header.Get("Authorization"))
	}
}

var _ = upstream.APIChat

// TestMessagesTranslatedStreamToolCallAndBreak: a chat-only replica's streamed tool call
// reaches the client as a tool_use block with its arguments in input_json_delta pieces; a
// chat stream that breaks off ends with an Anthropic error event.
func TestMessagesTranslatedStreamToolCallAndBreak(t *testing.T) {
	ts := startServer(t, func(c *gatewayConfig, _ *testOptions) { c.Pools.Fast.APIs = []string{"chat"} })
	var broken atomic.Bool
	ts.fast.onGenerate = func(w http.ResponseWriter, r *http.Request, body []byte) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, c := range []string{
			`{"id":"c","model":"m","choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_9","type":"function","function":{"name":"get_weather","arguments":""}}]}}]}`,
			`{"id":"c","model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]}}]}`,
			`{"id":"c","model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"Oslo\"}"}}]},"finish_reason":"tool_calls"}]}`,
		} {
			fmt.Fprintf(w, "data: %s\n\n", c)
			w.(http.Flusher).Flush()
		}
		if broken.Load() {
			panic(http.ErrAbortHandler) // the replica dies mid-stream
		}
		io.WriteString(w, "data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":3}}\n\ndata: [DONE]\n\n")
	}
	body := `{"max_tokens":9,"stream":true,"tools":[{"name":"get_weather","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":"Weather? p=0.1"}]}`
	resp, b := postJSON(t, ts.url+"/v1/messages", body)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	require.True(t, ts.fast.requests()[0].body["stream_options"].(map[string]any)["include_usage"].(bool), "asked for usage")
	names, data := sseNames(t, b)
	require.Equal(t, []string{"message_start", "ping", "content_block_start", "content_block_delta", "content_block_delta",
		"content_block_stop", "message_delta", "message_stop"}, names)
	require.Equal(t, map[string]any{"type": "tool_use", "id": "call_9", "name": "get_weather", "input": map[string]any{}}, data[2]["content_block"])
	var args strings.Builder
	for _, d := range data[3:5] {
		args.WriteString(d["delta"].(map[string]any)["partial_json"].(string))
	}
	require.JSONEq(t, `{"city":"Oslo"}`, args.String())
	require.Equal(t, "tool_use", data[6]["delta"].(map[string]any)["stop_reason"])
	require.EqualValues(t, 7, data[6]["usage"].(map[string]any)["input_tokens"])

	broken.Store(true)
	resp, b = postJSON(t, ts.url+"/v1/messages", body)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	names, data = sseNames(t, b)
	require.Equal(t, "error", names[len(names)-1], "%s", b)
	require.Equal(t, "api_error", data[len(data)-1]["error"].(map[string]any)["type"])
	require.NotContains(t, names, "message_stop")
}

// TestResponsesChainAcrossGateways: in fleet mode the turns of one conversation may reach
// different gateways; through the shared table each finds the replica holding the state.
func TestResponsesChainAcrossGateways(t *testing.T) {
	fast := []string{simUpstream(t, "sim-fast-0", "mock-fast"), simUpstream(t, "sim-fast-1", "mock-fast")}
	slow := []string{simUpstream(t, "sim-slow", "mock-slow")}
	shared := &mapShared{m: map[string]responseHome{}}
	var urls []string
	for range 2 {
		cfg := testConfig(fast, slow)
		cfg.Pools.Fast.Policy.Name = "round-robin"
		model := newFakeModel("v1")
		_, url, _ := run(t, cfg, testOptions{load: func() (router.Model, error) { return model, nil }, shared: shared})
		urls = append(urls, url)
	}
	resp, b := postJSON(t, urls[0]+"/v1/responses", `{"input":"hello p=0.1","max_output_tokens":2}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	home := resp.Header.Get(HeaderReplica)
	id := jsonField(t, b, "id")
	for turn := range 3 {
		resp, b = postJSON(t, urls[(turn+1)%2]+"/v1/responses", `{"input":"more","max_output_tokens":2,"previous_response_id":"`+id+`"}`)
		require.Equal(t, http.StatusOK, resp.StatusCode, "turn %d: %s", turn+2, b)
		require.Equal(t, home, resp.Header.Get(HeaderReplica), "turn %d", turn+2)
		id = jsonField(t, b, "id")
	}
}

func jsonField(t *testing.T, b []byte, field string) string {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	s, _ := m[field].(string)
	require.NotEmpty(t, s, "%s in %s", field, b)
	return s
}

func TestDecodeResponsesContinuationNeedsNoText(t *testing.T) {
	body := `{"input":[{"type":"function_call_output","call_id":"c","output":""}]%s}`
	_, err := decodeResponses([]byte(fmt.Sprintf(body, "")), fuzzLimits)
	requireBadRequest(t, err)
	p, err := decodeResponses([]byte(fmt.Sprintf(body, `,"previous_response_id":"resp_1"`)), fuzzLimits)
	require.NoError(t, err, "an agent's empty tool output continues its conversation")
	require.Equal(t, "resp_1", p.previous)
	require.Equal(t, "tool: \n", p.prompt)
}

// TestMessagesToolUseTranslatedRoundTrip: the tool loop through a chat-only sim pool, whole
// and streamed: the chat replica's tool call comes back as tool_use, and the tool_result turn
// goes to it as a tool message.
func TestMessagesToolUseTranslatedRoundTrip(t *testing.T) {
	url, _, _ := simServer(t, 1, func(c *gatewayConfig) { c.Pools.Fast.APIs = []string{"chat"} })
	tools := `"tools":[{"name":"get_weather","input_schema":{"type":"object"}}]`
	first := `{"max_tokens":3,` + tools + `,"messages":[{"role":"user","content":"Weather in Oslo? p=0.1"}]}`
	resp, b := postJSON(t, url+"/v1/messages", first)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	require.Equal(t, "chat", resp.Header.Get(HeaderTranslated))
	var m struct {
		StopReason string           `json:"stop_reason"`
		Content    []map[string]any `json:"content"`
	}
	require.NoError(t, json.Unmarshal(b, &m))
	require.Equal(t, "tool_use", m.StopReason)
	call := m.Content[0]
	require.Equal(t, "get_weather", call["name"])
	require.IsType(t, map[string]any{}, call["input"])

	resp, b = postJSON(t, url+"/v1/messages", strings.Replace(first, `"max_tokens":3`, `"max_tokens":3,"stream":true`, 1))
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	names, data := sseNames(t, b)
	require.Equal(t, []string{"message_start", "ping", "content_block_start", "content_block_delta", "content_block_stop",
		"message_delta", "message_stop"}, names)
	require.Equal(t, "tool_use", data[2]["content_block"].(map[string]any)["type"])
	require.Equal(t, "tool_use", data[5]["delta"].(map[string]any)["stop_reason"])

	next := fmt.Sprintf(`{"max_tokens":3,%s,"messages":[{"role":"user","content":"Weather in Oslo? p=0.1"},`+
		`{"role":"assistant","content":[{"type":"tool_use","id":%q,"name":"get_weather","input":{}}]},`+
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":%q,"content":"sunny p=0.1"}]}]}`, tools, call["id"], call["id"])
	resp, b = postJSON(t, url+"/v1/messages", next)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	require.NoError(t, json.Unmarshal(b, &m))
	require.Equal(t, "max_tokens", m.StopReason)
	require.Equal(t, "text", m.Content[0]["type"])
}

// TestAgentAPIAnswersGoOutWithTheirLength: a non-streamed Messages or Responses answer is
// read whole before it is sent (or translated), so it goes out with its Content-Length in
// one write, native or translated; a stream stays chunked.
func TestAgentAPIAnswersGoOutWithTheirLength(t *testing.T) {
	url, _, _ := simServer(t, 1, nil)
	ts := startServer(t, func(c *gatewayConfig, _ *testOptions) { c.Pools.Fast.APIs = []string{"chat", "completions"} })
	ts.fast.onGenerate = func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"c1","created":5,"model":"model-fast","choices":[{"index":0,"message":{"role":"assistant","content":"Hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`)
	}
	for _, tc := range []struct{ name, url, path, body string }{
		{"messages, native", url, "/v1/messages", `{"max_tokens":3,"messages":[{"role":"user","content":"hi p=0.1"}]}`},
		{"messages, translated", ts.url, "/v1/messages", `{"max_tokens":3,"messages":[{"role":"user","content":"hi p=0.1"}]}`},
		{"responses, native", url, "/v1/responses", `{"input":"hi p=0.1","max_output_tokens":3}`},
		{"responses, translated", ts.url, "/v1/responses", `{"input":"hi p=0.1","max_output_tokens":3}`},
	} {
		resp, b := postJSON(t, tc.url+tc.path, tc.body)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", tc.name, b)
		require.Equal(t, int64(len(b)), resp.ContentLength, tc.name)
		require.Empty(t, resp.TransferEncoding, tc.name)
		require.Equal(t, "application/json", resp.Header.Get("Content-Type"), tc.name)
		if tc.url == ts.url {
			require.Equal(t, "chat", resp.Header.Get(HeaderTranslated), tc.name)
		}
	}
	resp, b := postJSON(t, url+"/v1/messages", `{"max_tokens":2,"stream":true,"messages":[{"role":"user","content":"hi p=0.1"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	require.Equal(t, []string{"chunked"}, resp.TransferEncoding)
}

// TestDecodeAgentTurnsClassifyTheTask: a turn that returns a tool's output is classified by
// the conversation's last user text, in both agent APIs; only a conversation without user
// text falls back to the tool output.
func TestDecodeAgentTurnsClassifyTheTask(t *testing.T) {
	m, err := decodeMessages([]byte(`{"max_tokens":1,"messages":[{"role":"user","content":[{"type":"text","text":"fix it"},{"type":"text","text":"the log"}]},`+
		`{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]},`+
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"output"}]}]}`), fuzzLimits, false)
	require.NoError(t, err)
	require.Equal(t, "fix it", m.text.instruction)
	require.Equal(t, "the log", m.text.context)
	require.Equal(t, "user: fix itthe log\nassistant: \nuser: output\n", m.prompt, "the replica policies still see every turn")

	m, err = decodeMessages([]byte(`{"max_tokens":1,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]},`+
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]}]}`), fuzzLimits, false)
	require.NoError(t, err)
	require.Equal(t, "a", m.text.instruction)
	require.Equal(t, "b", m.text.context)

	r, err := decodeResponses([]byte(`{"input":[{"role":"user","content":"fix it"},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},`+
		`{"type":"function_call_output","call_id":"c","output":"output"}]}`), fuzzLimits)
	require.NoError(t, err)
	require.Equal(t, "fix it", r.text.instruction)

	r, err = decodeResponses([]byte(`{"input":[{"type":"function_call_output","call_id":"c","output":"output"}]}`), fuzzLimits)
	require.NoError(t, err)
	require.Equal(t, "output", r.text.instruction)
}

// TestNoTextRoutedByFallback: a request whose user turns hold only images is one every engine
// accepts; it has nothing to classify, so routing.fallback places it (reason no_text), in
// every routed API, and an earlier user text is classified when there is one.
func TestNoTextRoutedByFallback(t *testing.T) {
	image := map[string]string{
		"/v1/chat/completions": `{"max_tokens":2,"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]}]}`,
		"/v1/messages":         `{"max_tokens":2,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAAA"}}]}]}`,
		"/v1/responses":        `{"max_output_tokens":2,"input":[{"role":"user","content":[{"type":"input_image","image_url":"data:image/png;base64,AAAA"}]}]}`,
	}
	for _, fallback := range []string{router.FallbackFast, router.FallbackSlow} {
		url, model, _ := simServer(t, 1, func(c *gatewayConfig) { c.Routing.Fallback = fallback })
		warm := model.seen() // the start-up warm-up
		for path, body := range image {
			resp, b := postJSON(t, url+path, body)
			require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", path, b)
			require.Equal(t, fallback, resp.Header.Get(HeaderPath), path)
			require.Equal(t, "no_text", resp.Header.Get(HeaderReason), path)
			require.Empty(t, resp.Header.Get(HeaderPSlow), "%s: nothing was scored", path)
		}
		require.Equal(t, warm, model.seen(), "nothing was classified")
	}

	url, model, _ := simServer(t, 1, nil)
	resp, b := postJSON(t, url+"/v1/chat/completions", `{"max_tokens":2,"messages":[{"role":"user","content":"describe it p=0.9"},`+
		`{"role":"assistant","content":"Send it."},{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	require.Equal(t, "slow", resp.Header.Get(HeaderPath), "the earlier user text is classified")
	require.Equal(t, "describe it p=0.9", model.seen()[len(model.seen())-1])

	// Under routing.fallback: reject the request is refused, with a reason.
	url, _, _ = simServer(t, 1, func(c *gatewayConfig) { c.Routing.Fallback = router.FallbackReject })
	resp, b = postJSON(t, url+"/v1/chat/completions", image["/v1/chat/completions"])
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, string(b))
	require.Equal(t, "no_text", *apiErr(t, b).Code)
	require.Contains(t, apiErr(t, b).Message, "routing.fallback is reject")
}
