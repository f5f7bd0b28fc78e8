package gatewaybench

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/bench/dolly"
	"github.com/triage-gw/triage/classifier"
)

func TestTextSourceDistinct(t *testing.T) {
	rows := []dolly.Row{
		{Instruction: "a", Category: "classification"},
		{Instruction: "b", Context: "doc", Category: "summarization"},
		{Instruction: "c", Category: "open_qa"}, // not a target category
	}
	src, err := NewTextSource(rows, 1, true)
	require.NoError(t, err)
	seen := map[classifyItem]bool{}
	for range 6 {
		it := src.Take()
		require.False(t, seen[it], "repeated %v", it)
		seen[it] = true
		require.NotEqual(t, "c", it.Text)
	}
	cyc, err := NewTextSource(rows, 1, false)
	require.NoError(t, err)
	require.Equal(t, cyc.item(0), cyc.item(2), "without distinct, texts cycle")
	require.JSONEq(t, `{"text":"b","context":"doc"}`, string(classifyItem{Text: "b", Context: "doc"}.body()))
	require.JSONEq(t, `{"text":"a"}`, string(classifyItem{Text: "a"}.body()))

	// Distinct as the gateway's cache sees them: after the noise filter, which drops numbers
	// (a pass counter in digits made most of conc-miss's "misses" hits).
	filtered := map[string]bool{}
	for range 2 * 3000 {
		f := classifier.FilterNoise(src.Take().Text)
		require.False(t, filtered[f], "%q repeats after the noise filter", f)
		filtered[f] = true
	}
}

func TestLengthenMakesDistinctTextsThatDoNotOverlapTheirNeighbours(t *testing.T) {
	var rows []dolly.Row
	for i := range 200 {
		rows = append(rows, dolly.Row{Instruction: fmt.Sprintf("w%da w%db w%dc", i, i, i), Category: "classification"})
	}
	src, err := NewTextSource(rows, 1, false)
	require.NoError(t, err)
	src.lengthen(30) // ten rows per text
	seen := map[string]bool{}
	for i, it := range src.items {
		words := strings.Fields(it.Text)
		require.Len(t, words, 30)
		require.False(t, seen[it.Text], "text %d repeats another", i)
		seen[it.Text] = true
		if i == 0 {
			continue
		}
		prev := map[string]bool{}
		for _, w := range strings.Fields(src.items[i-1].Text) {
			prev[w] = true
		}
		shared := 0
		for _, w := range words {
			if prev[w] {
				shared++
			}
		}
		require.Less(t, shared, 15, "text %d shares %d of 30 words with the one before it", i, shared)
	}
}
