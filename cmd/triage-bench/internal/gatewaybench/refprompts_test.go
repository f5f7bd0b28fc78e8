package gatewaybench

import (
	"fmt"
	"regexp"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/bench/dolly"
)

// eightCategoryRows has three instructions in each of Dolly's eight categories, one of them
// twice (once with different whitespace), which the source must keep once.
func eightCategoryRows() []dolly.Row {
	var rows []dolly.Row
	for _, cat := range []string{"classification", "summarization", "creative_writing", "general_qa",
		"brainstorming", "closed_qa", "information_extraction", "open_qa"} {
		for i := range 3 {
			rows = append(rows, dolly.Row{Instruction: fmt.Sprintf("%s question %d", cat, i), Category: cat})
		}
		rows = append(rows, dolly.Row{Instruction: cat + "  question 0 ", Category: cat})
	}
	return rows
}

var tagPattern = regexp.MustCompile(`^(.+) \(ref r(\d+)-(true|false)-c(\d+)-[0-9a-f]{8}-[0-9a-f]{4}-(\d+)\)$`)

func TestRefPromptsAreUniqueTaggedAndCoverEveryCategory(t *testing.T) {
	p, err := newRefPrompts(eightCategoryRows(), 7)
	require.NoError(t, err)
	require.Len(t, p.instructions, 24, "each distinct instruction once")

	// Eight goroutines, each with its own cell, as the closed loop's workers take them.
	var (
		mu   sync.Mutex
		seen = map[string]bool{}
		wg   sync.WaitGroup
	)
	for w := range 8 {
		k := sideKey{Repeat: 1 + w%3, Clients: 16, Stream: w%2 == 1}
		wg.Go(func() {
			for range 1000 {
				s := p.take(k)
				m := tagPattern.FindStringSubmatch(s)
				mu.Lock()
				require.NotNil(t, m, "untagged prompt %q", s)
				require.False(t, seen[s], "prompt %q repeated", s)
				seen[s] = true
				mu.Unlock()
				require.Equal(t, strconv.Itoa(k.Repeat), m[2])
				require.Equal(t, strconv.FormatBool(k.Stream), m[3])
				require.Equal(t, "16", m[4])
			}
		})
	}
	wg.Wait()
	require.Len(t, seen, 8000)

	// One pass over the instructions uses every category.
	q, err := newRefPrompts(eightCategoryRows(), 7)
	require.NoError(t, err)
	cats := map[string]bool{}
	for range 24 {
		m := tagPattern.FindStringSubmatch(q.take(sideKey{Repeat: 1, Clients: 1}))
		cats[regexp.MustCompile(` question \d$`).ReplaceAllString(m[1], "")] = true
	}
	require.Len(t, cats, 8)
}

func TestRefPromptsAreSeeded(t *testing.T) {
	a, err := newRefPrompts(eightCategoryRows(), 1)
	require.NoError(t, err)
	b, err := newRefPrompts(eightCategoryRows(), 1)
	require.NoError(t, err)
	c, err := newRefPrompts(eightCategoryRows(), 2)
	require.NoError(t, err)
	k := sideKey{Repeat: 2, Clients: 1}
	var sa, sb, sc []string
	for range 10 {
		sa, sb, sc = append(sa, a.take(k)), append(sb, b.take(k)), append(sc, c.take(k))
	}
	require.Equal(t, sa, sb)
	require.NotEqual(t, sa, sc)
	require.Equal(t, "(ref r1-false-c1-", refTag(sideKey{Repeat: 1, Clients: 1}, 1, 123)[:17])

	_, err = newRefPrompts([]dolly.Row{{Instruction: "  "}}, 1)
	require.ErrorContains(t, err, "no Dolly instruction")
}
