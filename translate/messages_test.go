package translate

import (
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMessagesToChat(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
		askUsage       bool
	}{
		{"text turn and system string",
			`{"model":"m","max_tokens":10,"system":"Be terse.","messages":[{"role":"user","content":"Hi"}]}`,
			`{"model":"m","max_tokens":10,"messages":[{"role":"system","content":"Be terse."},{"role":"user","content":"Hi"}]}`, false},
		{"system blocks joined",
			`{"max_tokens":1,"system":[{"type":"text","text":"a","cache_control":{"type":"ephemeral"}},{"type":"text","text":"b"}],"messages":[{"role":"user","content":"x"}]}`,
			`{"max_tokens":1,"messages":[{"role":"system","content":"a\nb"},{"role":"user","content":"x"}]}`, false},
		{"one text block is a string",
			`{"max_tokens":1,"messages":[{"role":"user","content":[{"type":"text","text":"x"}]}]}`,
			`{"max_tokens":1,"messages":[{"role":"user","content":"x"}]}`, false},
		{"text and image blocks are parts",
			`{"max_tokens":1,"messages":[{"role":"user","content":[{"type":"text","text":"what is"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAA"}}]}]}`,
			`{"max_tokens":1,"messages":[{"role":"user","content":[{"type":"text","text":"what is"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAA"}}]}]}`, false},
		{"sampling, stop, user, stream with usage",
			`{"max_tokens":5,"temperature":0.2,"top_p":0.9,"top_k":40,"stop_sequences":["END"],"stream":true,"metadata":{"user_id":"u1"},"messages":[{"role":"user","content":"x"}]}`,
			`{"max_tokens":5,"stop":["END"],"stream":true,"stream_options":{"include_usage":true},"temperature":0.2,"top_p":0.9,"top_k":40,"user":"u1","messages":[{"role":"user","content":"x"}]}`, true},
		{"stream without usage",
			`{"max_tokens":5,"stream":true,"messages":[{"role":"user","content":"x"}]}`,
			`{"max_tokens":5,"stream":true,"messages":[{"role":"user","content":"x"}]}`, false},
		{"tools and tool_choice tool",
			`{"max_tokens":1,"tools":[{"name":"get_weather","description":"Weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}}],"tool_choice":{"type":"tool","name":"get_weather","disable_parallel_tool_use":true},"messages":[{"role":"user","content":"x"}]}`,
			`{"max_tokens":1,"tools":[{"type":"function","function":{"name":"get_weather","description":"Weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}],"tool_choice":{"type":"function","function":{"name":"get_weather"}},"parallel_tool_calls":false,"messages":[{"role":"user","content":"x"}]}`, false},
		{"tool_choice any", `{"max_tokens":1,"tool_choice":{"type":"any"},"messages":[{"role":"user","content":"x"}]}`,
			`{"max_tokens":1,"tool_choice":"required","messages":[{"role":"user","content":"x"}]}`, false},
		{"tool_choice auto", `{"max_tokens":1,"tool_choice":{"type":"auto"},"messages":[{"role":"user","content":"x"}]}`,
			`{"max_tokens":1,"tool_choice":"auto","messages":[{"role":"user","content":"x"}]}`, false},
		{"tool_choice none", `{"max_tokens":1,"tool_choice":{"type":"none"},"messages":[{"role":"user","content":"x"}]}`,
			`{"max_tokens":1,"tool_choice":"none","messages":[{"role":"user","content":"x"}]}`, false},
		{"tool_use and tool_result round trip",
			`{"max_tokens":1,"messages":[{"role":"user","content":"Weather?"},` +
				`{"role":"assistant","content":[{"type":"text","text":"Let me look."},{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city": "Oslo"}}]},` +
				`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"sunny"}]},{"type":"text","text":"And tomorrow?"}]}]}`,
			`{"max_tokens":1,"messages":[{"role":"user","content":"Weather?"},` +
				`{"role":"assistant","content":"Let me look.","tool_calls":[{"id":"toolu_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\"}"}}]},` +
				`{"role":"tool","content":"sunny","tool_call_id":"toolu_1"},{"role":"user","content":"And tomorrow?"}]}`, false},
		{"tool_use alone has null content, error result is marked",
			`{"max_tokens":1,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]},` +
				`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"boom","is_error":true}]}]}`,
			`{"max_tokens":1,"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"t","type":"function","function":{"name":"f","arguments":"{}"}}]},` +
				`{"role":"tool","content":"Error: boom","tool_call_id":"t"}]}`, false},
		{"thinking and unknown fields are dropped",
			`{"max_tokens":1,"thinking":{"type":"enabled","budget_tokens":10},"service_tier":"auto","messages":[{"role":"assistant","content":[{"type":"thinking","thinking":"hm","signature":"s"},{"type":"text","text":"ok"}]}]}`,
			`{"max_tokens":1,"messages":[{"role":"assistant","content":"ok"}]}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _, err := MessagesToChat([]byte(tc.in), tc.askUsage)
			require.NoError(t, err)
			require.JSONEq(t, tc.want, string(got))
		})
	}
}

func TestChatToMessage(t *testing.T) {
	req := MessagesRequest{StopSequences: []string{"END"}}
	for _, tc := range []struct{ name, in, want string }{
		{"text, stop",
			`{"id":"chatcmpl-1","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":2}}`,
			`{"id":"msg_chatcmpl-1","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"Hello"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":2,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}`},
		{"length, cached tokens",
			`{"id":"c","model":"m","choices":[{"message":{"content":"Hel"},"finish_reason":"length"}],"usage":{"prompt_tokens":10,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":8}}}`,
			`{"id":"msg_c","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"Hel"}],"stop_reason":"max_tokens","stop_sequence":null,"usage":{"input_tokens":2,"output_tokens":2,"cache_creation_input_tokens":0,"cache_read_input_tokens":8}}`},
		{"vLLM's cache read and written, as its own /v1/messages splits them",
			`{"id":"c","model":"m","choices":[{"message":{"content":"Hel"},"finish_reason":"length"}],"usage":{"prompt_tokens":77,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":32,"created_cache_tokens":32}}}`,
			`{"id":"msg_c","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"Hel"}],"stop_reason":"max_tokens","stop_sequence":null,"usage":{"input_tokens":13,"output_tokens":2,"cache_creation_input_tokens":32,"cache_read_input_tokens":32}}`},
		{"cache counts past the prompt are clipped to it",
			`{"id":"c","model":"m","choices":[{"message":{"content":"Hel"},"finish_reason":"length"}],"usage":{"prompt_tokens":40,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":32,"created_cache_tokens":32}}}`,
			`{"id":"msg_c","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"Hel"}],"stop_reason":"max_tokens","stop_sequence":null,"usage":{"input_tokens":0,"output_tokens":2,"cache_creation_input_tokens":8,"cache_read_input_tokens":32}}`},
		{"stop sequence named by vLLM",
			`{"id":"c","model":"m","choices":[{"message":{"content":"a"},"finish_reason":"stop","stop_reason":"END"}],"usage":{"prompt_tokens":1,"completion_tokens":1}}`,
			`{"id":"msg_c","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"a"}],"stop_reason":"stop_sequence","stop_sequence":"END","usage":{"input_tokens":1,"output_tokens":1,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}`},
		{"tool calls",
			`{"id":"c","model":"m","choices":[{"message":{"content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\"}"}},{"id":"call_2","type":"function","function":{"name":"f","arguments":"not json"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":3,"completion_tokens":4}}`,
			`{"id":"msg_c","type":"message","role":"assistant","model":"m","content":[{"type":"tool_use","id":"call_1","name":"get_weather","input":{"city":"Oslo"}},{"type":"tool_use","id":"call_2","name":"f","input":{"arguments":"not json"}}],"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":3,"output_tokens":4,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}`},
		{"a call forced by a named tool_choice ends with stop: tool_use, as vLLM's /v1/messages says",
			`{"id":"c","model":"m","choices":[{"message":{"content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"pick","arguments":"{\"c\": \"red\"}"}}]},"finish_reason":"stop","stop_reason":null}]}`,
			`{"id":"msg_c","type":"message","role":"assistant","model":"m","content":[{"type":"tool_use","id":"call_1","name":"pick","input":{"c": "red"}}],"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":0,"output_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}`},
		{"a stop sequence that cut a call short wins over tool_use",
			`{"id":"c","model":"m","choices":[{"message":{"content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"pick","arguments":"{\"c\": "}}]},"finish_reason":"stop","stop_reason":"END"}]}`,
			`{"id":"msg_c","type":"message","role":"assistant","model":"m","content":[{"type":"tool_use","id":"call_1","name":"pick","input":{"arguments":"{\"c\": "}}],"stop_reason":"stop_sequence","stop_sequence":"END","usage":{"input_tokens":0,"output_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}`},
		{"a whole call and a matched stop sequence: tool_use",
			`{"id":"c","model":"m","choices":[{"message":{"content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"pick","arguments":"{}"}}]},"finish_reason":"stop","stop_reason":"END"}]}`,
			`{"id":"msg_c","type":"message","role":"assistant","model":"m","content":[{"type":"tool_use","id":"call_1","name":"pick","input":{}}],"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":0,"output_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}`},
		{"content filter", `{"id":"c","model":"m","choices":[{"message":{"content":""},"finish_reason":"content_filter"}]}`,
			`{"id":"msg_c","type":"message","role":"assistant","model":"m","content":[],"stop_reason":"refusal","stop_sequence":null,"usage":{"input_tokens":0,"output_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ChatToMessage([]byte(tc.in), req)
			require.NoError(t, err)
			require.JSONEq(t, tc.want, string(got))
		})
	}
	_, err := ChatToMessage([]byte(`{"choices":[]}`), req)
	require.Error(t, err)
}

func TestErrorShapes(t *testing.T) {
	for status, typ := range map[int]string{400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
		404: "not_found_error", 429: "rate_limit_error", 500: "api_error", 502: "api_error", 503: "overloaded_error", 529: "overloaded_error"} {
		require.Equal(t, typ, ErrorType(status), status)
	}
	require.JSONEq(t, `{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: bad"}}`,
		string(ChatErrorToMessages(400, []byte(`{"error":{"message":"max_tokens: bad","type":"BadRequestError"}}`))))
	require.JSONEq(t, `{"type":"error","error":{"type":"api_error","message":"the replica answered status 500"}}`,
		string(ChatErrorToMessages(500, []byte(`oops`))))
}

// events parses a Messages stream into (name, data) pairs.
func events(t *testing.T, b []byte) (names []string, data []map[string]any) {
	t.Helper()
	for block := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n\n") {
		name, payload, ok := strings.Cut(block, "\ndata: ")
		require.True(t, ok, block)
		name = strings.TrimPrefix(name, "event: ")
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(payload), &m))
		names, data = append(names, name), append(data, m)
	}
	return names, data
}

func chatSSE(chunks ...string) string {
	var b strings.Builder
	for _, c := range chunks {
		b.WriteString("data: " + c + "\n\n")
	}
	return b.String()
}

func TestStreamText(t *testing.T) {
	src := chatSSE(
		`{"id":"c1","model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"},"finish_reason":null}]}`,
		`{"id":"c1","model":"m","choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":"stop","stop_reason":"END"}]}`,
		`{"id":"c1","model":"m","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2}}`,
		`[DONE]`)
	out, err := io.ReadAll(iotestHalf(NewStream(strings.NewReader(src), MessagesRequest{StopSequences: []string{"END"}})))
	require.NoError(t, err)
	names, data := events(t, out)
	require.Equal(t, []string{"message_start", "ping", "content_block_start", "content_block_delta", "content_block_delta",
		"content_block_stop", "message_delta", "message_stop"}, names)
	require.Equal(t, "msg_c1", data[0]["message"].(map[string]any)["id"])
	require.Equal(t, map[string]any{"type": "text_delta", "text": "lo"}, data[4]["delta"])
	require.Equal(t, map[string]any{"stop_reason": "stop_sequence", "stop_sequence": "END"}, data[6]["delta"])
	require.EqualValues(t, 9, data[6]["usage"].(map[string]any)["input_tokens"])
	require.EqualValues(t, 2, data[6]["usage"].(map[string]any)["output_tokens"])
}

func TestStreamToolCalls(t *testing.T) {
	src := chatSSE(
		`{"id":"c","model":"m","choices":[{"delta":{"role":"assistant","content":"Checking."}}]}`,
		`{"id":"c","model":"m","choices":[{"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":""}}]}}]}`,
		`{"id":"c","model":"m","choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]}}]}`,
		`{"id":"c","model":"m","choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"Oslo\"}"}}]}}]}`,
		`{"id":"c","model":"m","choices":[{"delta":{"tool_calls":[{"index":1,"id":"call_2","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`,
		`[DONE]`)
	out, err := io.ReadAll(NewStream(strings.NewReader(src), MessagesRequest{}))
	require.NoError(t, err)
	names, data := events(t, out)
	require.Equal(t, []string{"message_start", "ping",
		"content_block_start", "content_block_delta", "content_block_stop",
		"content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
		"content_block_start", "content_block_delta", "content_block_stop",
		"message_delta", "message_stop"}, names)
	require.Equal(t, map[string]any{"type": "tool_use", "id": "call_1", "name": "get_weather", "input": map[string]any{}}, data[5]["content_block"])
	require.EqualValues(t, 1, data[5]["index"])
	require.Equal(t, map[string]any{"type": "input_json_delta", "partial_json": `{"city":`}, data[6]["delta"])
	require.EqualValues(t, 2, data[9]["index"])
	require.Equal(t, "tool_use", data[12]["delta"].(map[string]any)["stop_reason"])
}

func TestStreamBreaks(t *testing.T) {
	src := io.MultiReader(strings.NewReader(chatSSE(`{"id":"c","model":"m","choices":[{"delta":{"content":"a"}}]}`)),
		errReader{errors.New("connection reset")})
	s := NewStream(src, MessagesRequest{})
	s.OnBreak = func(err error) []byte { return []byte("event: error\ndata: {\"type\":\"error\"}\n\n") }
	out, err := io.ReadAll(s)
	require.NoError(t, err)
	names, _ := events(t, out)
	require.Equal(t, []string{"message_start", "ping", "content_block_start", "content_block_delta", "error"}, names)
	require.ErrorContains(t, s.Err(), "connection reset")

	// An error object from the replica becomes a Messages error event.
	out, err = io.ReadAll(NewStream(strings.NewReader(chatSSE(`{"error":{"message":"overloaded","type":"server_error"}}`)), MessagesRequest{}))
	require.NoError(t, err)
	names, data := events(t, out)
	require.Equal(t, []string{"error"}, names)
	require.Equal(t, "overloaded", data[0]["error"].(map[string]any)["message"])

	// A stream that ends before finishing broke off; one that finished without [DONE] did not.
	s = NewStream(strings.NewReader(chatSSE(`{"id":"c","choices":[{"delta":{"content":"a"}}]}`)), MessagesRequest{})
	_, _ = io.ReadAll(s)
	require.ErrorIs(t, s.Err(), io.ErrUnexpectedEOF)
	s = NewStream(strings.NewReader(chatSSE(`{"id":"c","choices":[{"delta":{"content":"a"},"finish_reason":"stop"}]}`)), MessagesRequest{})
	out, _ = io.ReadAll(s)
	require.NoError(t, s.Err())
	require.Contains(t, string(out), "message_stop")

	// A line longer than maxLine breaks the stream instead of growing without bound.
	s = NewStream(strings.NewReader("data: "+strings.Repeat("x", maxLine+10)+"\n\n"), MessagesRequest{})
	_, _ = io.ReadAll(s)
	require.ErrorIs(t, s.Err(), errLineTooLong)
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// iotestHalf reads in small pieces, so events are split across Reads.
func iotestHalf(r io.Reader) io.Reader { return &smallReader{r} }

type smallReader struct{ r io.Reader }

func (s *smallReader) Read(p []byte) (int, error) {
	if len(p) > 7 {
		p = p[:7]
	}
	return s.r.Read(p)
}

// BenchmarkTranslate measures what translation adds to one Messages request against a
// chat-only pool: the request, and a 64-token answer, whole and streamed.
func BenchmarkTranslate(b *testing.B) {
	req := []byte(`{"model":"m","max_tokens":64,"system":"You are a helpful assistant.","tools":[{"name":"get_weather","input_schema":{"type":"object"}}],` +
		`"messages":[{"role":"user","content":"What is the weather in Oslo?"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"get_weather","input":{"city":"Oslo"}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"sunny"},{"type":"text","text":"And tomorrow?"}]}]}`)
	answer := []byte(`{"id":"c","model":"m","choices":[{"message":{"content":"` + strings.Repeat("word ", 64) + `"},"finish_reason":"stop"}],"usage":{"prompt_tokens":50,"completion_tokens":64}}`)
	var chunks []string
	for range 64 {
		chunks = append(chunks, `{"id":"c","model":"m","choices":[{"index":0,"delta":{"content":"word "},"finish_reason":null}]}`)
	}
	chunks = append(chunks, `{"id":"c","model":"m","choices":[],"usage":{"prompt_tokens":50,"completion_tokens":64}}`, "[DONE]")
	stream := chatSSE(chunks...)
	b.Run("request", func(b *testing.B) {
		for b.Loop() {
			if _, _, err := MessagesToChat(req, true); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("answer", func(b *testing.B) {
		for b.Loop() {
			if _, err := ChatToMessage(answer, MessagesRequest{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("stream64", func(b *testing.B) {
		for b.Loop() {
			if _, err := io.Copy(io.Discard, NewStream(strings.NewReader(stream), MessagesRequest{})); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/64, "µs/token")
	})
}

func TestStreamForcedToolCallStopsForToolUse(t *testing.T) {
	// vLLM's chat stream for a named tool_choice: the whole call in one delta, finish "stop".
	src := chatSSE(
		`{"id":"c","model":"m","choices":[{"delta":{"role":"assistant","content":""}}]}`,
		`{"id":"c","model":"m","choices":[{"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"pick","arguments":"{\"c\": "}}]}}]}`,
		`{"id":"c","model":"m","choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"red\"}"}}]},"finish_reason":"stop"}]}`,
		`[DONE]`)
	out, err := io.ReadAll(NewStream(strings.NewReader(src), MessagesRequest{}))
	require.NoError(t, err)
	names, data := events(t, out)
	require.Equal(t, "message_delta", names[len(names)-2])
	require.Equal(t, "tool_use", data[len(data)-2]["delta"].(map[string]any)["stop_reason"])
}
