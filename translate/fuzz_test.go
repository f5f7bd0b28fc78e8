package translate

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzStream: whatever a chat replica streams, the translation ends (no error, bounded
// output) and yields only whole named events whose data is JSON.
func FuzzStream(f *testing.F) {
	f.Add([]byte(chatSSE(`{"id":"c","model":"m","choices":[{"delta":{"content":"a"},"finish_reason":"stop"}]}`, "[DONE]")))
	f.Add([]byte(chatSSE(`{"id":"c","choices":[{"delta":{"tool_calls":[{"index":3,"id":"x","function":{"name":"f","arguments":"{"}}]}}]}`,
		`{"choices":[{"delta":{"tool_calls":[{"index":-1}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":-5}}`)))
	f.Add([]byte("data: {\"error\":{\"message\":\"boom\"}}\n\n"))
	f.Add([]byte("data: [DONE]\r\n\r\n"))
	f.Add([]byte("event: x\ndata: not json\n\n: comment\n\ndata:"))
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := io.ReadAll(NewStream(bytes.NewReader(in), MessagesRequest{StopSequences: []string{"a"}}))
		require.NoError(t, err)
		require.LessOrEqual(t, len(out), 64*len(in)+4096, "output bounded by the input")
		for ev := range strings.SplitSeq(strings.TrimSuffix(string(out), "\n\n"), "\n\n") {
			if ev == "" {
				continue
			}
			name, data, ok := strings.Cut(ev, "\ndata: ")
			require.True(t, ok, "%q", ev)
			require.True(t, strings.HasPrefix(name, "event: "), "%q", ev)
			require.True(t, json.Valid([]byte(data)), "%q", data)
		}
	})
}

// FuzzChatToMessage: whatever a chat replica answers, translating it errors or gives a
// Messages answer that is JSON.
func FuzzChatToMessage(f *testing.F) {
	f.Add([]byte(`{"id":"c","model":"m","choices":[{"message":{"content":"hi","tool_calls":[{"id":"t","function":{"name":"f","arguments":"[1]"}}]},"finish_reason":"stop","stop_reason":"a"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":9}}}`))
	f.Add([]byte(`{"choices":[{}]}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := ChatToMessage(in, MessagesRequest{StopSequences: []string{"a"}})
		if err != nil {
			return
		}
		var m Message
		require.NoError(t, json.Unmarshal(out, &m))
		require.Equal(t, "message", m.Type)
		require.GreaterOrEqual(t, m.Usage.InputTokens, 0)
	})
}

// FuzzResponsesTranslation: whatever a chat replica answers or streams, the Responses
// translation ends with whole typed events whose data is JSON and whose sequence numbers
// count from 0, or a Responses object (or an error) for a whole answer.
func FuzzResponsesTranslation(f *testing.F) {
	f.Add([]byte(chatSSE(`{"id":"c","model":"m","choices":[{"delta":{"content":"a"},"finish_reason":"length"}]}`,
		`{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}}`, "[DONE]")))
	f.Add([]byte(`{"id":"c","model":"m","choices":[{"message":{"content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3}}`))
	f.Add([]byte("data: {\"error\":{\"message\":\"boom\",\"code\":5}}\n\n"))
	f.Add([]byte("event: x\ndata: not json\n\n: comment\n\ndata:"))
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := io.ReadAll(NewResponsesStream(bytes.NewReader(in), ResponsesRequest{}))
		require.NoError(t, err)
		require.LessOrEqual(t, len(out), 64*len(in)+8192, "output bounded by the input")
		seq := 0
		for ev := range strings.SplitSeq(strings.TrimSuffix(string(out), "\n\n"), "\n\n") {
			if ev == "" {
				continue
			}
			name, data, ok := strings.Cut(ev, "\ndata: ")
			require.True(t, ok, "%q", ev)
			var v struct {
				Type           string `json:"type"`
				SequenceNumber int    `json:"sequence_number"`
			}
			require.NoError(t, json.Unmarshal([]byte(data), &v), "%q", data)
			require.Equal(t, "event: "+v.Type, name)
			require.Equal(t, seq, v.SequenceNumber)
			seq++
		}
		if b, err := ChatToResponse(in, ResponsesRequest{}); err == nil {
			var r Response
			require.NoError(t, json.Unmarshal(b, &r))
			require.Equal(t, "response", r.Object)
		}
	})
}
