package translate

import (
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestResponsesToChat(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
		askUsage       bool
	}{
		{"string input, instructions, sampling",
			`{"model":"m","instructions":"Be brief.","input":"Hi","max_output_tokens":5,"temperature":0,"top_p":0.9,"user":"u1","store":true}`,
			`{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}],"max_tokens":5,"temperature":0,"top_p":0.9,"user":"u1"}`, false},
		{"message items, developer as system, parts",
			`{"input":[{"role":"developer","content":"Rules."},{"type":"message","role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_text","text":"b"}]},{"role":"assistant","content":[{"type":"output_text","text":"c"}]},{"role":"user","content":[{"type":"input_text","text":"d"},{"type":"input_image","image_url":"data:image/png;base64,AA=="}]}]}`,
			`{"messages":[{"role":"system","content":"Rules."},{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},{"role":"assistant","content":"c"},{"role":"user","content":[{"type":"text","text":"d"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AA=="}}]}]}`, false},
		{"stream asks for usage",
			`{"input":"x","stream":true}`,
			`{"messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":{"include_usage":true}}`, true},
		{"stream without usage",
			`{"input":"x","stream":true,"tool_choice":"auto"}`,
			`{"messages":[{"role":"user","content":"x"}],"stream":true}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _, err := ResponsesToChat([]byte(tc.in), tc.askUsage)
			require.NoError(t, err)
			require.JSONEq(t, tc.want, string(got))
		})
	}
}

func TestResponsesToChatRefusesWhatItCannotTranslate(t *testing.T) {
	for _, tc := range []struct{ in, param string }{
		{`{"input":"x","previous_response_id":"resp_1"}`, "previous_response_id"},
		{`{"input":"x","tools":[{"type":"function","name":"f"}]}`, "tools"},
		{`{"input":"x","tool_choice":"required"}`, "tool_choice"},
		{`{"input":[{"type":"function_call_output","call_id":"c","output":"o"}]}`, "input[0].type"},
		{`{"input":[{"role":"user","content":[{"type":"input_file","file_id":"f"}]}]}`, "input[0].content[0].type"},
		{`{"input":[{"role":"user","content":[{"type":"input_image","file_id":"f"}]}]}`, "input[0].content[0].image_url"},
	} {
		_, _, err := ResponsesToChat([]byte(tc.in), false)
		var u *Untranslatable
		require.ErrorAs(t, err, &u, tc.in)
		require.Equal(t, tc.param, u.Param)
	}
}

func TestChatToResponse(t *testing.T) {
	five, in := 5, "Be brief."
	req := ResponsesRequest{Instructions: &in, MaxOutputTokens: &five}
	got, err := ChatToResponse([]byte(`{"id":"chatcmpl-7","created":42,"model":"m","choices":[{"message":{"content":"Hello"},"finish_reason":"length"}],"usage":{"prompt_tokens":10,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":4}}}`), req)
	require.NoError(t, err)
	require.JSONEq(t, `{"id":"resp_7","object":"response","created_at":42,"model":"m","status":"incomplete","error":null,
		"incomplete_details":{"reason":"max_output_tokens"},"instructions":"Be brief.","max_output_tokens":5,"temperature":null,"top_p":null,"user":null,
		"output":[{"type":"message","id":"msg_7","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Hello","annotations":[]}]}],
		"parallel_tool_calls":true,"previous_response_id":null,"store":false,"tool_choice":"auto","tools":[],"text":{"format":{"type":"text"}},"metadata":{},
		"usage":{"input_tokens":10,"input_tokens_details":{"cached_tokens":4},"output_tokens":5,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":15}}`, string(got))

	got, err = ChatToResponse([]byte(`{"id":"c","model":"m","choices":[{"message":{"content":"Hi"},"finish_reason":"stop"}]}`), ResponsesRequest{})
	require.NoError(t, err)
	require.Contains(t, string(got), `"status":"completed"`)
	require.Contains(t, string(got), `"incomplete_details":null`)
	_, err = ChatToResponse([]byte(`{"choices":[]}`), req)
	require.Error(t, err)
}

func TestResponsesStream(t *testing.T) {
	src := chatSSE(
		`{"id":"chatcmpl-9","created":7,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`,
		`{"id":"chatcmpl-9","model":"m","choices":[{"index":0,"delta":{"content":"Hel"}}]}`,
		`{"id":"chatcmpl-9","model":"m","choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":"length"}]}`,
		`{"id":"chatcmpl-9","model":"m","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2}}`,
		`[DONE]`)
	out, err := io.ReadAll(iotestHalf(NewResponsesStream(strings.NewReader(src), ResponsesRequest{})))
	require.NoError(t, err)
	names, data := events(t, out)
	require.Equal(t, []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
		"response.output_text.delta", "response.output_text.delta", "response.output_text.done", "response.content_part.done",
		"response.output_item.done", "response.completed"}, names)
	for i, d := range data {
		require.Equal(t, names[i], d["type"])
		require.EqualValues(t, i, d["sequence_number"])
	}
	require.Equal(t, "resp_9", data[0]["response"].(map[string]any)["id"])
	require.Equal(t, "lo", data[5]["delta"])
	require.Equal(t, "msg_9", data[5]["item_id"])
	require.Equal(t, "Hello", data[6]["text"])
	done := data[9]["response"].(map[string]any)
	require.Equal(t, "incomplete", done["status"])
	require.EqualValues(t, 2, done["usage"].(map[string]any)["output_tokens"])
	require.EqualValues(t, 9, done["usage"].(map[string]any)["input_tokens"])
	require.Equal(t, "Hello", done["output"].([]any)[0].(map[string]any)["content"].([]any)[0].(map[string]any)["text"])
}

func TestResponsesStreamBreaks(t *testing.T) {
	src := chatSSE(`{"id":"c","model":"m","choices":[{"delta":{"content":"a"}}]}`) // no finish, no [DONE]
	s := NewResponsesStream(strings.NewReader(src), ResponsesRequest{})
	out, err := io.ReadAll(s)
	require.NoError(t, err)
	names, _ := events(t, out)
	require.Equal(t, "error", names[len(names)-1])
	require.ErrorIs(t, s.Err(), io.ErrUnexpectedEOF)

	src = chatSSE(`{"error":{"message":"boom","code":400}}`)
	out, err = io.ReadAll(NewResponsesStream(strings.NewReader(src), ResponsesRequest{}))
	require.NoError(t, err)
	names, data := events(t, out)
	require.Equal(t, []string{"error"}, names)
	require.Equal(t, "boom", data[0]["message"])
}
