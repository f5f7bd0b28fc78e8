package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/internal/jsonscan"
	"github.com/triage-gw/triage/router"
	"github.com/triage-gw/triage/translate"
	"github.com/triage-gw/triage/upstream"
)

var fuzzLimits = limits{maxTextBytes: 256, maxBatchTexts: 4, splitPasted: true}

// requireBadRequest holds every decode error to the contract: an *apiError with a 4xx status,
// an OpenAI type and a message.
func requireBadRequest(t *testing.T, err error) {
	t.Helper()
	var ae *apiError
	require.True(t, errors.As(err, &ae), "decode error must be an *apiError, got %T: %v", err, err)
	require.GreaterOrEqual(t, ae.status, 400)
	require.Less(t, ae.status, 500)
	require.NotEmpty(t, ae.message)
	require.Equal(t, typeInvalidRequest, ae.typ)
}

// requireValidInput holds every decoded text to the classifier's needs.
func requireValidInput(t *testing.T, in textInput) {
	t.Helper()
	require.NotEmpty(t, in.input)
	require.True(t, utf8.ValidString(in.input))
	require.LessOrEqual(t, len(in.input), fuzzLimits.maxTextBytes)
	require.Equal(t, in.input, router.Input(in.input, ""), "already normalised")
}

// requireRoutableInput: a routed API's text is valid, or absent altogether (a request whose
// user turns hold no text, placed by routing.fallback).
func requireRoutableInput(t *testing.T, in textInput) {
	t.Helper()
	if in != (textInput{}) {
		requireValidInput(t, in)
	}
}

var decodeSeeds = []string{
	`{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"u"}}]}]}`,
	`{"text":"hello"}`,
	`{"text":"hello","context":"world"}`,
	`{"text":"  spaced \n out  "}`,
	`{"text":"Summarize:\n\n one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty a b c d e f g h i j k l"}`,
	`{"text":""}`,
	`{"text":null}`,
	`{"text":5}`,
	`{"text":"x","extra":1}`,
	`{"texts":["a",{"text":"b","context":"c"}]}`,
	`{"texts":[]}`,
	`{"texts":[1,2]}`,
	`{"messages":[{"role":"user","content":"hi"}]}`,
	`{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],"stream":true}`,
	`{"messages":[{"role":"system","content":"s"}],"context":"c"}`,
	`{"prompt":"p","context":"c"}`,
	`{"prompt":["a","b"]}`,
	`{"prompt":[1,2]}`,
	`[1,2,3]`,
	`"string"`,
	`{"text":"\ud800"}`,
	"{\"text\":\"\xff\"}",
	`{"text":"x"} trailing`,
	``,
	`{`,
	`null`,
}

func FuzzDecodeQueryProcess(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		in, err := decodeQueryProcess(body, fuzzLimits)
		if err != nil {
			requireBadRequest(t, err)
			return
		}
		requireValidInput(t, in)
	})
}

func FuzzDecodeClassify(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		ins, err := decodeClassify(body, fuzzLimits)
		if err != nil {
			requireBadRequest(t, err)
			return
		}
		require.NotEmpty(t, ins)
		require.LessOrEqual(t, len(ins), fuzzLimits.maxBatchTexts)
		for _, in := range ins {
			requireValidInput(t, in)
		}
	})
}

func FuzzDecodeChat(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := decodeChat(body, fuzzLimits)
		if err != nil {
			requireBadRequest(t, err)
			return
		}
		requireRoutableInput(t, p.text)
		if p.context {
			out, err := withoutField(body, "context")
			require.NoError(t, err)
			require.NotContains(t, string(out), `"context":`)
		}
	})
}

func FuzzDecodeCompletion(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := decodeCompletion(body, fuzzLimits)
		if err != nil {
			requireBadRequest(t, err)
			return
		}
		requireValidInput(t, p.text)
	})
}

func TestDecodeChatPicksTheLastUserMessage(t *testing.T) {
	for _, tc := range []struct {
		name, body, input, prompt string
	}{
		{"string content", `{"messages":[{"role":"user","content":"first"},{"role":"assistant","content":"reply"},{"role":"user","content":"second"}]}`,
			"second", "user: first\nassistant: reply\nuser: second\n"},
		{"parts: first is instruction, rest context", `{"messages":[{"role":"user","content":[{"type":"text","text":"Sum up"},{"type":"text","text":"doc A"},{"type":"text","text":"doc B"}]}]}`,
			"Sum up [SEP] doc A doc B", "user: Sum updoc Adoc B\n"},
		{"top-level context", `{"messages":[{"role":"user","content":[{"type":"text","text":"Sum"},{"type":"text","text":"up"}]}],"context":"the doc"}`,
			"Sum up [SEP] the doc", "user: Sumup\n"},
		{"system only before user", `{"messages":[{"role":"system","content":"sys"},{"role":"user","content":"q"},{"role":"tool","content":"t"}]}`,
			"q", "system: sys\nuser: q\ntool: t\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := decodeChat([]byte(tc.body), limits{maxTextBytes: 1000, maxBatchTexts: 1})
			require.NoError(t, err)
			require.Equal(t, tc.input, p.text.input)
			require.Equal(t, tc.prompt, p.prompt)
		})
	}
}

func TestErrorResponseMapsEveryErrorInOnePlace(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	ue := &upstream.UpstreamError{Pool: "fast", Replica: "r", Err: errors.New("connection refused")}
	for _, tc := range []struct {
		err        error
		status     int
		retryAfter string
	}{
		{badRequest("x", "text", "bad"), 400, ""},
		{fiber.ErrNotFound, 404, ""},
		{fiber.ErrRequestEntityTooLarge, 413, ""},
		{fmt.Errorf("submit: %w", router.ErrQueueFull), 429, "1"},
		{fmt.Errorf("pool fast: %w", upstream.ErrRejected), 429, "1"},
		{fmt.Errorf("pool fast: %w", upstream.ErrNoHealthyReplica), 503, "1"},
		{&upstream.UpstreamError{Err: fmt.Errorf("%w: no headers", upstream.ErrUpstreamTimeout)}, 504, ""},
		{context.DeadlineExceeded, 504, ""},
		{errRequestTimeout, 504, ""},
		{ue, 502, ""},
		{&upstreamStatusError{status: 500}, 502, ""},
		{&upstreamStatusError{status: 429, retryAfter: "7"}, 429, "7"},
		{fmt.Errorf("pool fast: %w", upstream.ErrInvalidBody), 400, ""},
		{fmt.Errorf("pool fast: %w %q", upstream.ErrUnknownReplica, "x"), 404, ""},
		{router.ErrClosed, 503, ""},
		{context.Canceled, 503, ""},
		{router.ErrNoModel, 503, ""},
		{&router.ReloadError{Err: errors.New("bad head")}, 500, ""},
		{&router.UnclassifiableError{Err: errors.New("bad text")}, 400, ""},
		{&upstream.HeaderError{Name: "User-Agent", Offset: 1, Byte: 1}, 400, ""},
		{errors.New("something else"), 500, ""},
	} {
		t.Run(tc.err.Error(), func(t *testing.T) {
			ae := errorResponse(tc.err, log)
			require.Equal(t, tc.status, ae.status)
			require.Equal(t, tc.retryAfter, ae.retryAfter)
			require.NotEmpty(t, ae.typ)
			require.NotEmpty(t, ae.message)
		})
	}
	require.Equal(t, http.StatusInternalServerError, errorResponse(errors.New(strings.Repeat("x", 10)), log).status)
}

var agentSeeds = []string{
	`{"max_tokens":5,"system":"s","messages":[{"role":"user","content":"hi"}]}`,
	`{"max_tokens":5,"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image","source":{"type":"url","url":"u"}}]}],"stream":true}`,
	`{"max_tokens":5,"tools":[{"name":"f","input_schema":{}}],"tool_choice":{"type":"tool","name":"f"},"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"r"}]}]}]}`,
	`{"max_tokens":0,"messages":[]}`,
	`{"input":"hello","previous_response_id":"resp_1","store":false}`,
	`{"input":[{"role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_text","text":"b"}]}],"instructions":"i"}`,
	`{"input":[{"type":"function_call_output","call_id":"c","output":"o"}]}`,
	`{"input":[{"role":"developer","content":"x"}]}`,
	`{"max_tokens":5,"messages":[{"role":"user","content":"task"},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"out"},{"type":"text","text":"more"}]}]}`,
	`{"input":[{"role":"user","content":"task"},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"o"}]}`,
	`{"max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"u"}}]}]}`,
	`{"input":[{"role":"user","content":[{"type":"input_image","image_url":"u"}]}]}`,
	`{"input":"x","temperature":0.5,"top_p":1,"max_output_tokens":3,"user":"u","instructions":"i"}`,
	`{"max_tokens":5,"temperature":0.5,"top_p":1,"top_k":3,"stop_sequences":["s"],"metadata":{"user_id":"u"},"tools":[{"name":"f","description":"d","input_schema":{}}],"tool_choice":{"type":"auto","disable_parallel_tool_use":true},"system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA"}},{"type":"text","text":"t"}]}]}`,
}

func FuzzDecodeMessages(f *testing.F) {
	for _, s := range append(decodeSeeds, agentSeeds...) {
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, body []byte, count bool) {
		p, err := decodeMessages(body, fuzzLimits, count)
		if err != nil {
			requireBadRequest(t, err)
			return
		}
		requireRoutableInput(t, p.text)
		// What the gateway accepted, it can translate for a chat-only pool.
		_, _, err = translate.MessagesToChat(body, true)
		require.NoError(t, err)
	})
}

func FuzzDecodeResponses(f *testing.F) {
	for _, s := range append(decodeSeeds, agentSeeds...) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := decodeResponses(body, fuzzLimits)
		if err != nil {
			requireBadRequest(t, err)
			return
		}
		if p.previous != "" && p.text.input == "" {
			return // a continuation without text: pinned, never classified
		}
		requireRoutableInput(t, p.text)
		// What the gateway accepted, it can translate for a chat-only pool, or it names the
		// field that has no chat form (a 400 api_not_supported, not a parse error).
		if _, _, err = translate.ResponsesToChat(body, true); err != nil {
			_, ok := errors.AsType[*translate.Untranslatable](err)
			require.True(t, ok, "%v", err)
		}
	})
}

// TestLongTextsAreCutNotRefused: a text over server.max_text_bytes is classified on its
// first max_text_bytes bytes, cut after a whole word, never refused.
func TestLongTextsAreCutNotRefused(t *testing.T) {
	lim := limits{maxTextBytes: 64, maxBatchTexts: 1}
	for _, tc := range []struct{ name, instruction, context, want string }{
		{"short text as is", "Write a poem", "", "Write a poem"},
		{"cut after the last whole word", strings.Repeat("word ", 40), "", strings.TrimSpace(strings.Repeat("word ", 13))},
		{"a cut on a space keeps the word before it", strings.Repeat("abc ", 16) + "tail", "", strings.TrimSpace(strings.Repeat("abc ", 16))},
		{"whitespace is normalised before the cut", "  lead\n\n\tand   spaces " + strings.Repeat("x ", 40), "",
			"lead and spaces" + strings.TrimRight(strings.Repeat(" x", 24), " ")},
		{"one long word is cut on a rune boundary", strings.Repeat("é", 40), "", strings.Repeat("é", 32)},
		{"a dangling separator is dropped", strings.Repeat("w", 55), "the context", strings.Repeat("w", 55)},
		{"a context is kept as far as it fits", "Sum up", strings.Repeat("doc ", 30), "Sum up [SEP] " + strings.TrimSpace(strings.Repeat("doc ", 13))},
		{"leading whitespace beyond the limit", strings.Repeat(" ", 500) + "the question", "", "the question"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, err := newTextInput(tc.instruction, tc.context, "text", lim)
			require.NoError(t, err)
			require.Equal(t, tc.want, in.input)
			require.LessOrEqual(t, len(in.input), lim.maxTextBytes)
			require.True(t, utf8.ValidString(in.input))
			require.Equal(t, tc.instruction, in.instruction, "the request's own text is kept whole")
		})
	}
}

// FuzzObjectFieldsAgree holds objectFields (jsonscan) to objectFieldsDecoder (encoding/json's
// Decoder, what read every body before): the same fields for any bytes, the same error.
func FuzzObjectFieldsAgree(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add([]byte(s), false)
	}
	f.Add([]byte(`{"Messages":[],"model":"m"}`), true)
	f.Add([]byte(`{"model":"a","model":"b"}`), false)
	f.Add([]byte(`{"m\u006fdel":"a","x":{"y":[1,"]"]}} `), true)
	f.Add([]byte(`{"model":"a"} {}`), false)
	f.Fuzz(func(t *testing.T, body []byte, strict bool) {
		if !utf8.Valid(body) { // refused before either reads it (checkBody)
			return
		}
		read := func(fn func([]byte, string, bool, bool, map[string]*json.RawMessage) error, top bool) (map[string]string, error) {
			var model, messages, stream json.RawMessage
			err := fn(body, "", strict, top, map[string]*json.RawMessage{"model": &model, "messages": &messages, "stream": &stream})
			return map[string]string{"model": string(model), "messages": string(messages), "stream": string(stream)}, err
		}
		for _, top := range []bool{true, false} {
			if !top && !(jsonscan.Valid(body) && len(bytes.TrimSpace(body)) > 0 && bytes.TrimSpace(body)[0] == '{') {
				continue // nested values come from a body already read
			}
			got, gotErr := read(objectFields, top)
			want, wantErr := read(objectFieldsDecoder, top)
			if wantErr != nil {
				require.Error(t, gotErr, "top %v", top)
				require.Equal(t, wantErr.Error(), gotErr.Error(), "top %v", top)
				continue
			}
			require.NoError(t, gotErr, "top %v", top)
			require.Equal(t, want, got, "top %v", top)
		}
	})
}

// FuzzSplicedBodies: withStreamUsage and withoutField change exactly the member they are
// about, for any object the decoder accepts.
func FuzzSplicedBodies(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add([]byte(s))
	}
	f.Add([]byte(`{"stream_options":{"include_usage":false,"x":1},"context":"c","messages":[]}`))
	f.Add([]byte(`{"stream_options":null,"a":1}`))
	f.Add([]byte(` { "a" : 1 , "context" : [ 1 ] } `))
	f.Fuzz(func(t *testing.T, body []byte) {
		var in map[string]any
		if !utf8.Valid(body) || json.Unmarshal(body, &in) != nil || in == nil { // an object, as the decoder accepts
			return
		}
		out, err := withoutField(body, "context")
		require.NoError(t, err)
		var got map[string]any
		require.NoError(t, json.Unmarshal(out, &got), "%s", out)
		want := maps.Clone(in)
		delete(want, "context")
		require.Equal(t, want, got)

		so, isObj := in["stream_options"].(map[string]any)
		if _, ok := in["stream_options"]; ok && !isObj && in["stream_options"] != nil {
			return // withStreamUsage is not asked to set include_usage in a non-object
		}
		out, err = withStreamUsage(body)
		require.NoError(t, err)
		got = nil
		require.NoError(t, json.Unmarshal(out, &got), "%s", out)
		want = maps.Clone(in)
		opts := maps.Clone(so)
		if opts == nil {
			opts = map[string]any{}
		}
		opts["include_usage"] = true
		want["stream_options"] = opts
		require.Equal(t, want, got)
	})
}
