package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/bench/dolly"
)

func TestTextSourceDistinct(t *testing.T) {
	rows := []dolly.Row{
		{Instruction: "a", Category: "classification"},
		{Instruction: "b", Context: "doc", Category: "summarization"},
		{Instruction: "c", Category: "open_qa"}, // not a target category
	}
	src, err := newTextSource(rows, 1, true)
	require.NoError(t, err)
	seen := map[classifyItem]bool{}
	for range 6 {
		it := src.take()
		require.False(t, seen[it], "repeated %v", it)
		seen[it] = true
		require.NotEqual(t, "c", it.Text)
	}
	cyc, err := newTextSource(rows, 1, false)
	require.NoError(t, err)
	require.Equal(t, cyc.item(0), cyc.item(2), "without distinct, texts cycle")
	require.JSONEq(t, `{"text":"b","context":"doc"}`, string(classifyItem{Text: "b", Context: "doc"}.body()))
	require.JSONEq(t, `{"text":"a"}`, string(classifyItem{Text: "a"}.body()))
}
