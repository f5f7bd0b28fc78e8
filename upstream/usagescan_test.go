package upstream

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// usageDocs are documents the usage readers meet, and the corners of encoding/json's rules
// that the fast reads must give the same answer for (usagescan.go).
var usageDocs = []string{
	`{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"}}],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}`,
	`{"id":"c","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2}}`,
	`{"choices":[{"delta":{}}],"usage":null}`,
	`{"type":"message","usage":{"input_tokens":5,"output_tokens":4,"cache_read_input_tokens":10,"cache_creation_input_tokens":2}}`,
	`{"type":"message_start","message":{"id":"m","usage":{"input_tokens":9,"output_tokens":1}}}`,
	`{"type":"message_delta","delta":{},"usage":{"output_tokens":6}}`,
	`{"type":"response.completed","response":{"usage":{"input_tokens":3,"output_tokens":2}}}`,
	`{"type":"response.created","response":{"usage":null}}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a"}}`,
	`{"type":"response.output_text.delta","delta":"a"}`,
	`{"type":"ping"}`,
	// duplicates: the last wins, an object merges into the one before, a null resets
	`{"usage":{"prompt_tokens":1},"usage":{"completion_tokens":2}}`,
	`{"usage":{"prompt_tokens":1,"completion_tokens":2},"usage":null}`,
	`{"usage":{"prompt_tokens":1,"completion_tokens":2,"prompt_tokens":null}}`,
	`{"message":{"usage":{"input_tokens":1}},"message":{"usage":{"output_tokens":2}}}`,
	`{"message":{"usage":{"input_tokens":1,"output_tokens":2}},"message":null,"response":{"usage":{"output_tokens":4}}}`,
	`{"choices":[],"choices":[{}],"usage":{}}`,
	`{"choices":[{}],"choices":[],"usage":{}}`,
	`{"choices":[],"choices":null,"usage":{}}`,
	`{"type":"x.delta","type":null}`,
	`{"type":"x.delta","type":"ping"}`,
	// the wrong kind of value fails the whole document
	`{"usage":{"prompt_tokens":"7","completion_tokens":3}}`,
	`{"usage":{"prompt_tokens":7.0,"completion_tokens":3}}`,
	`{"usage":{"prompt_tokens":7,"completion_tokens":3e1}}`,
	`{"usage":{"prompt_tokens":7,"completion_tokens":99999999999999999999}}`,
	`{"usage":{"prompt_tokens":7,"completion_tokens":-3}}`,
	`{"usage":{"prompt_tokens":7,"completion_tokens":true}}`,
	`{"usage":[1],"x":1}`,
	`{"usage":5}`,
	`{"message":"hi","usage":{"prompt_tokens":1,"completion_tokens":1}}`,
	`{"choices":{},"usage":{}}`,
	`{"type":5}`,
	// names: escapes, case, other scripts
	`{"\u0075sage":{"prompt_tokens":1,"completion_tokens":1}}`,
	`{"Usage":{"Prompt_Tokens":1,"completion_tokens":1}}`,
	`{"USAGE":{"PROMPT_TOKENS":2,"COMPLETION_TOKENS":3}}`,
	`{"uſage":{"prompt_tokens":1,"completion_tokens":1}}`,
	`{"usage":{"prompt_tokens":1,"completion_tokenſ":1}}`,
	`{"Type":"content_block_delta"}`,
	`{"type":"x\u002edelta"}`,
	"{\"type\":\"x\xff.delta\"}",
	// not one object
	`null`, `[]`, `"usage"`, `{"usage":{}} {}`, `{"usage":{"prompt_tokens":1}`, ``, `{"usage":{"prompt_tokens":1,"completion_tokens":2}}  `,
}

// FuzzUsageReaders holds the fast reads to encoding/json's on any document.
func FuzzUsageReaders(f *testing.F) {
	for _, d := range usageDocs {
		f.Add([]byte(d))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		requireSameReads(t, doc)
	})
}

func TestUsageReadersAgreeWithEncodingJSON(t *testing.T) {
	for _, d := range usageDocs {
		requireSameReads(t, []byte(d))
	}
	// and some answers they must give, not only agree on
	u, full, _ := parseUsage([]byte(`{"usage":{"prompt_tokens":1},"usage":{"completion_tokens":2}}`))
	require.Equal(t, Usage{1, 2}, u, "a second usage object merges into the first, as encoding/json has it")
	require.True(t, full)
	_, _, out := parseUsage([]byte(`{"usage":{"prompt_tokens":7.0,"completion_tokens":3}}`))
	require.False(t, out, "a count with a fraction fails the document")
	u, full, _ = parseUsage([]byte(`{"USAGE":{"PROMPT_TOKENS":2,"COMPLETION_TOKENS":3}}`))
	require.Equal(t, Usage{2, 3}, u, "names match case-insensitively (through encoding/json)")
	require.True(t, full)
	require.False(t, tokenEvent([]byte(`{"type":"x.delta","type":"ping"}`)), "the last type wins")
	require.True(t, tokenEvent([]byte(`{"type":"x.delta","type":null}`)), "a null type leaves the one before")
}

func requireSameReads(t *testing.T, doc []byte) {
	t.Helper()
	u, full, out := parseUsage(doc)
	ju, jfull, jout := parseUsageJSON(doc)
	require.Equal(t, [3]any{ju, jfull, jout}, [3]any{u, full, out}, "parseUsage(%q)", doc)
	require.Equal(t, bytes.Contains(doc, []byte(`"usage"`)) && isUsageChunkJSON(doc), IsUsageChunk(doc), "IsUsageChunk(%q)", doc)
	require.Equal(t, !bytes.Contains(doc, []byte(`"type"`)) || tokenEventJSON(doc), tokenEvent(doc), "tokenEvent(%q)", doc)
}

func BenchmarkParseUsage(b *testing.B) {
	doc := []byte(usageDocs[0])
	for _, bc := range []struct {
		name string
		f    func([]byte) (Usage, bool, bool)
	}{{"scan", parseUsage}, {"encoding-json", parseUsageJSON}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				bc.f(doc)
			}
		})
	}
}

func BenchmarkTokenEvent(b *testing.B) {
	ev := []byte(usageDocs[8])
	for _, bc := range []struct {
		name string
		f    func([]byte) bool
	}{{"scan", tokenEvent}, {"encoding-json", tokenEventJSON}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				bc.f(ev)
			}
		})
	}
}
