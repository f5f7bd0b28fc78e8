package server

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestWrapped(t *testing.T) {
	for s, want := range map[string]string{
		"<system-reminder>\nUse the todo list.\n</system-reminder>":      "system-reminder",
		"  <environment_details>\n# cwd\n/src\n</environment_details>\n": "environment_details",
		`<doc id="1">text</doc>`: "doc",
		"<a>x</a>":               "a",
		"<a >x</a>":              "a",
		"<b>bold</b> and more":   "", // text after the element
		"<b>x</i>":               "",
		"Fix <b>this</b>":        "",
		"<>x</>":                 "",
		"<1a>x</1a>":             "",
		"<a>":                    "",
		"</a>":                   "",
		"<br/> then </br>":       "",
		"":                       "",
		"plain text":             "",
		"<ab>x</a>":              "",
	} {
		require.Equal(t, want, wrapped(s), "%q", s)
	}
}

func TestSplit(t *testing.T) {
	rem := "<system-reminder>context</system-reminder>"
	for _, c := range []struct {
		parts            []string
		instruction, ctx string
	}{
		{[]string{"q"}, "q", ""},
		{[]string{"q", "doc"}, "q", "doc"},
		{[]string{rem, "fix the test", "log"}, "fix the test", "log"},
		{[]string{"<document>text</document>", "summarize it"}, "<document>text</document>", "summarize it"},
		{[]string{rem, "<environment_details>x</environment_details>"}, rem, "<environment_details>x</environment_details>"},
		{[]string{rem, rem + " and more"}, rem + " and more", ""},
		{[]string{" ", "q"}, "q", ""},
		{[]string{" ", rem}, rem, ""},
		{[]string{" "}, " ", ""},
		{nil, "", ""},
	} {
		in, ctx := split(c.parts)
		require.Equal(t, c.instruction, in, "%q", c.parts)
		require.Equal(t, c.ctx, ctx, "%q", c.parts)
	}
}

// TestAgentInjectedContextIsNotTheInstruction: Claude Code's shape, a <system-reminder> block
// before the user's words and beside a tool's result. The user's words are the instruction in
// the first turn, and the tool turn is classified by them too.
func TestAgentInjectedContextIsNotTheInstruction(t *testing.T) {
	rem := `{"type":"text","text":"<system-reminder>\nThe user's CLAUDE.md says: use tabs.\n</system-reminder>"}`
	first := `{"role":"user","content":[` + rem + `,{"type":"text","text":"fix the failing test"}]}`
	m, err := decodeMessages([]byte(`{"max_tokens":1,"messages":[`+first+`]}`), fuzzLimits, false)
	require.NoError(t, err)
	require.Equal(t, "fix the failing test", m.text.instruction)
	require.Empty(t, m.text.context, "the reminder is not the request's document")

	loop := `{"max_tokens":1,"messages":[` + first + `,{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"Bash","input":{}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"FAIL x_test.go:12"},` + rem + `]}]}`
	m2, err := decodeMessages([]byte(loop), fuzzLimits, false)
	require.NoError(t, err)
	require.Equal(t, m.text, m2.text, "the tool turn is classified by the task: one cache entry")

	c, err := decodeChat([]byte(`{"messages":[{"role":"user","content":[{"type":"text","text":"<environment_details>cwd /src</environment_details>"},{"type":"text","text":"rename foo"}]}]}`), fuzzLimits)
	require.NoError(t, err)
	require.Equal(t, "rename foo", c.text.instruction)

	c, err = decodeChat([]byte(`{"context":"the doc","messages":[{"role":"user","content":[{"type":"text","text":"<system-reminder>x</system-reminder>"},{"type":"text","text":"summarize"},{"type":"text","text":"briefly"}]}]}`), fuzzLimits)
	require.NoError(t, err)
	require.Equal(t, "summarize\nbriefly", c.text.instruction, "with the context field too")
	require.Equal(t, "the doc", c.text.context)

	// A tool's output comes before a turn of injected texts alone.
	m, err = decodeMessages([]byte(`{"max_tokens":1,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]},`+
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"out"},`+rem+`]}]}`), fuzzLimits, false)
	require.NoError(t, err)
	require.Equal(t, "out", m.text.instruction)

	// A turn of injected texts alone is classified when nothing else is.
	c, err = decodeChat([]byte(`{"messages":[{"role":"user","content":"<environment_details>cwd /src</environment_details>"}]}`), fuzzLimits)
	require.NoError(t, err)
	require.Equal(t, "<environment_details>cwd /src</environment_details>", c.text.instruction)

	// Codex's shape: its AGENTS.md and environment as user messages of their own, before and
	// after the user's.
	r, err := decodeResponses([]byte(`{"input":[{"role":"user","content":[{"type":"input_text","text":"<user_instructions>\nRun make test.\n</user_instructions>"}]},`+
		`{"role":"user","content":[{"type":"input_text","text":"<environment_context>\n  <cwd>/src</cwd>\n</environment_context>"}]},`+
		`{"role":"user","content":[{"type":"input_text","text":"rename foo"}]},`+
		`{"role":"user","content":[{"type":"input_text","text":"<environment_context>\n  <cwd>/src/x</cwd>\n</environment_context>"}]}]}`), fuzzLimits)
	require.NoError(t, err)
	require.Equal(t, "rename foo", r.text.instruction)
	require.Empty(t, r.text.context)

	r, err = decodeResponses([]byte(`{"input":[{"role":"user","content":[{"type":"input_text","text":"<system-reminder>x</system-reminder>"},{"type":"input_text","text":"rename foo"}]}]}`), fuzzLimits)
	require.NoError(t, err)
	require.Equal(t, "rename foo", r.text.instruction)
	require.Empty(t, r.text.context)
}
