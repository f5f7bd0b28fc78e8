package gatewaybench

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/triage-gw/triage/bench/dolly"
)

// targetCategories are the Dolly categories the classifier was trained on
// (fast: classification, summarization; slow: creative_writing, general_qa).
var targetCategories = []string{"classification", "summarization", "creative_writing", "general_qa"}

// classifyItem is one text as the gateway takes it: the instruction and an
// optional attached document, which the gateway joins as
// "instruction [SEP] context".
type classifyItem struct {
	Text    string `json:"text"`
	Context string `json:"context,omitempty"`
}

// TextSource hands out classify bodies from Dolly rows of the target
// categories in a seeded shuffled order. With distinct set, every body it
// ever returns is a different text (a cache miss): after one pass over the
// rows it starts again with " (pass <word>)" appended to each instruction,
// the pass number spelled in letters (passWord): the gateway's noise filter
// drops numbers before the cache, so " (pass 2)" and " (pass 3)" would be one
// entry and most "misses" hits.
// Without it, it cycles over the same texts. Safe for concurrent use.
type TextSource struct {
	items    []classifyItem
	distinct bool
	next     atomic.Int64
}

func NewTextSource(rows []dolly.Row, seed uint64, distinct bool) (*TextSource, error) {
	// Dolly repeats some instructions; keep each text once, as the gateway's
	// cache sees it (trimmed, whitespace runs collapsed).
	var items []classifyItem
	seen := map[string]bool{}
	for _, r := range rows {
		if !slices.Contains(targetCategories, r.Category) {
			continue
		}
		key := strings.Join(strings.Fields(r.Instruction), " ") + "\x00" + strings.Join(strings.Fields(r.Context), " ")
		if seen[key] {
			continue
		}
		seen[key] = true
		items = append(items, classifyItem{Text: r.Instruction, Context: r.Context})
	}
	if len(items) == 0 {
		return nil, fmt.Errorf("dolly: no rows of the categories %v", targetCategories)
	}
	rng := rand.New(rand.NewPCG(seed, 0x74657874))
	rng.Shuffle(len(items), func(i, j int) { items[i], items[j] = items[j], items[i] })
	return &TextSource{items: items, distinct: distinct}, nil
}

// item returns text number n.
func (t *TextSource) item(n int64) classifyItem {
	it := t.items[n%int64(len(t.items))]
	if pass := n / int64(len(t.items)); t.distinct && pass > 0 {
		it.Text = fmt.Sprintf("%s (pass %s)", it.Text, passWord(pass))
	}
	return it
}

// passWord spells n ≥ 0 in base 20 with the letters g–z, least significant first: a word
// of letters only and no hex digit, which the noise filter keeps.
func passWord(n int64) string {
	const letters = "ghijklmnopqrstuvwxyz"
	var b []byte
	for {
		b = append(b, letters[n%20])
		if n /= 20; n == 0 {
			return string(b)
		}
	}
}

// lengthen makes every item exactly words words long (whitespace-separated), by appending
// the texts of the items after a start row, for benchmarks of long prompts: a Dolly text is
// ~40 words, a 256-word-piece prompt ~190. Every item has its own start row, so they stay
// distinct, and loses its context (it is joined into the text).
func (t *TextSource) lengthen(words int) {
	all := make([][]string, len(t.items))
	for i, it := range t.items {
		all[i] = strings.Fields(it.Text + " " + it.Context)
	}
	// Text i starts at row i·stride (a prime that does not divide the row count, so every
	// start differs), not row i: texts built from neighbouring rows would share most of their
	// words, and a scenario's texts would all resemble the stretch of Dolly it drew.
	stride := 7919
	if len(all)%stride == 0 {
		stride = 7907
	}
	for i := range t.items {
		var w []string
		for j := (i * stride) % len(all); len(w) < words; j = (j + 1) % len(all) {
			w = append(w, all[j]...)
		}
		t.items[i] = classifyItem{Text: strings.Join(w[:words], " ")}
	}
}

// Take returns the next text's item.
func (t *TextSource) Take() classifyItem { return t.item(t.next.Add(1) - 1) }

// body marshals an item as a /v1/classify or /v1/query-process body.
func (it classifyItem) body() []byte {
	b, _ := json.Marshal(it) // strings only: cannot fail
	return b
}
