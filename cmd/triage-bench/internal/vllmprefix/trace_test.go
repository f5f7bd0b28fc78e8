package vllmprefix

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTraceSharesSystemPromptsAndIsSeeded(t *testing.T) {
	c := TraceConfig{Sessions: 7, Turns: 4, SystemPrompts: 3, SystemWords: 50, UserWords: 9, Seed: 5}
	require.NoError(t, c.Validate())
	tr := NewTrace(c)
	require.Len(t, tr, 7)
	systems := map[string]bool{}
	for i, s := range tr {
		require.Len(t, s.Users, 4)
		require.Equal(t, tr[i%3].System, s.System, "session %d shares system prompt %d", i, i%3)
		systems[s.System] = true
		require.Len(t, strings.Fields(s.Users[0]), 9)
	}
	require.Len(t, systems, 3, "three distinct system prompts")
	require.Len(t, strings.Fields(tr[0].System), 4+50, `"You are assistant N." and 50 words`)
	require.NotEqual(t, tr[0].Users[0], tr[3].Users[0], "sessions sharing a system prompt differ after it")

	require.Equal(t, tr, NewTrace(c), "one seed, one trace")
	c.Seed = 6
	require.NotEqual(t, tr[0].System, NewTrace(c)[0].System)
}

func TestConversationGrowsByAnswerAndUserMessage(t *testing.T) {
	s := Session{ID: "s", System: "sys", Users: []string{"u0", "u1", "u2"}}
	require.Equal(t, []Message{{"system", "sys"}, {"user", "u0"}}, s.Conversation(0, nil))
	got := s.Conversation(2, []string{"a0", "a1"})
	require.Equal(t, []Message{{"system", "sys"}, {"user", "u0"}, {"assistant", "a0"}, {"user", "u1"}, {"assistant", "a1"}, {"user", "u2"}}, got)
	require.Equal(t, s.Conversation(1, []string{"a0"}), got[:4], "each turn's prompt starts with the previous turn's")
}

func TestTraceConfigErrorsNameTheFlags(t *testing.T) {
	err := TraceConfig{Sessions: 0, Turns: 65, SystemPrompts: 1, SystemWords: 1, UserWords: 1}.Validate()
	require.ErrorContains(t, err, "--sessions: must be in [1, 256], got 0")
	require.ErrorContains(t, err, "--turns: must be in [1, 64], got 65")
	require.NoError(t, DefaultTraceConfig().Validate())
}
