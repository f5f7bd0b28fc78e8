package classifier

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// WordCache remembers the word pieces the HF tokenizer gave each word of a text, so that a
// text made of words it has seen is tokenized without the tokenizer. The HF tokenizer reads
// a text at about 2 MB/s on this project's VMs (about 50 µs for a short instruction, 1.4 ms
// for the 256 pieces of a long prompt): it walks Unicode tables for every character and
// allocates for every piece, and most of that work is the same for every occurrence of a
// word.
//
// It is exact, not an approximation: a word here is a run of bytes between ASCII
// whitespace (space, \t, \n, \r), and for a BERT WordPiece tokenizer a text's pieces are its
// words' pieces in order. Its normaliser acts on one character at a time (and canonical
// reordering never crosses a space), its pre-tokenizer splits at whitespace, WordPiece
// splits each word alone, and an added token ([SEP]) never holds a space. The same property
// lets encode tokenize a long text a prefix at a time. A new word of printable ASCII (most
// of them) it splits itself, as WordPiece would (see wordPiece); any other it learns from the
// tokenizer's answer for the words it lacks, joined (which piece belongs to which word, from
// the pieces' offsets). TestWordCacheIsExact, TestWordCacheSplitsLikeTheTokenizer and
// FuzzWordCache (package onnx) hold both ways to the tokenizer on every Dolly row and word,
// on texts and words built to sit on their edges and on fuzzed input.
//
// NewWordCache refuses a tokenizer.json without that property (a byte-level BPE, where a
// word's pieces depend on the space before it). It keeps words of at most maxWordBytes
// bytes, and about maxBytes of heap in all: when full it starts again empty. Safe for
// concurrent use.
type WordCache struct {
	cls, sep uint32
	split    *wordPiece // nil: every new word goes to the tokenizer

	mu    sync.RWMutex
	words map[string][]uint32
	bytes int // the words' heap, as entryBytes counts it

	hits, whole, splits, learnt atomic.Uint64
}

const (
	// maxBytes bounds a WordCache's heap: about 60,000 English words, which prose seldom
	// exceeds between two resets; a stream of unique identifiers costs a reset now and
	// then.
	maxBytes = 8 << 20
	// maxWordBytes bounds a word the cache keeps: a longer one (a URL, a hash, a line of
	// code without spaces) is rarely seen twice, and a text holding one goes to the
	// tokenizer.
	maxWordBytes = 64
)

// NewWordCache builds a WordCache for the tokenizer described by raw (a tokenizer.json),
// or returns an error saying why the file is not one whose words are tokenized
// independently; the caller then tokenizes every text with the tokenizer.
func NewWordCache(raw []byte) (*WordCache, error) {
	var doc struct {
		AddedTokens []struct {
			ID      uint32 `json:"id"`
			Content string `json:"content"`
		} `json:"added_tokens"`
		Normalizer *struct {
			Type      string `json:"type"`
			Lowercase *bool  `json:"lowercase"`
		} `json:"normalizer"`
		PreTokenizer *struct {
			Type string `json:"type"`
		} `json:"pre_tokenizer"`
		PostProcessor *struct {
			Type   string `json:"type"`
			Single []struct {
				SpecialToken *struct {
					ID string `json:"id"`
				} `json:"SpecialToken"`
				Sequence *struct {
					ID string `json:"id"`
				} `json:"Sequence"`
			} `json:"single"`
		} `json:"post_processor"`
		Model *struct {
			Type string `json:"type"`
			wordPieceModel
		} `json:"model"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	n, pre, post, m := doc.Normalizer, doc.PreTokenizer, doc.PostProcessor, doc.Model
	switch {
	case n == nil || n.Type != "BertNormalizer":
		return nil, fmt.Errorf("normalizer is not BertNormalizer")
	case pre == nil || pre.Type != "BertPreTokenizer":
		return nil, fmt.Errorf("pre-tokenizer is not BertPreTokenizer")
	case m == nil || m.Type != "WordPiece":
		return nil, fmt.Errorf("model is not WordPiece")
	case post == nil || post.Type != "TemplateProcessing" || len(post.Single) != 3 ||
		post.Single[0].SpecialToken == nil || post.Single[0].SpecialToken.ID != "[CLS]" ||
		post.Single[1].Sequence == nil || post.Single[1].Sequence.ID != "A" ||
		post.Single[2].SpecialToken == nil || post.Single[2].SpecialToken.ID != "[SEP]":
		return nil, fmt.Errorf("post-processor is not [CLS] $A [SEP]")
	}
	w := &WordCache{words: map[string][]uint32{}}
	var cls, sep bool
	for _, a := range doc.AddedTokens {
		if strings.ContainsAny(a.Content, " \t\n\r") {
			return nil, fmt.Errorf("added token %q holds whitespace", a.Content)
		}
		switch a.Content {
		case "[CLS]":
			w.cls, cls = a.ID, true
		case "[SEP]":
			w.sep, sep = a.ID, true
		}
	}
	if !cls || !sep {
		return nil, fmt.Errorf("no [CLS] and [SEP] added tokens")
	}
	if n.Lowercase != nil {
		added := make([]string, len(doc.AddedTokens))
		for i, a := range doc.AddedTokens {
			added[i] = a.Content
		}
		// Without a splitter (a model it cannot split like the tokenizer), every new
		// word goes to the tokenizer: slower, as exact.
		w.split, _ = newWordPiece(m.wordPieceModel, *n.Lowercase, added)
	}
	return w, nil
}

// LearnOnly turns the cache's own splitting off, before its first use: every new word goes
// to the tokenizer. For tests and comparisons.
func (w *WordCache) LearnOnly() { w.split = nil }

// WordCacheStats is what a WordCache has done since it was made.
type WordCacheStats struct {
	// Answered counts the texts Encode answered; Whole, those the caller tokenized whole
	// instead (NoteWhole): a word over 64 bytes, or words still missing after a few rounds.
	Answered, Whole uint64
	// Split counts the new words the cache split itself (see wordPiece); Learnt, those it
	// kept from the tokenizer's answers (Learn).
	Split, Learnt uint64
	// Words is how many words it holds now.
	Words int
}

// Stats says what the cache has done since it was made, and how many words it holds.
func (w *WordCache) Stats() WordCacheStats {
	w.mu.RLock()
	n := len(w.words)
	w.mu.RUnlock()
	return WordCacheStats{Answered: w.hits.Load(), Whole: w.whole.Load(), Split: w.splits.Load(),
		Learnt: w.learnt.Load(), Words: n}
}

// NoteWhole counts a text its caller tokenized whole rather than through Encode.
func (w *WordCache) NoteWhole() { w.whole.Add(1) }

// Encode returns t's ids as the tokenizer would give them ([CLS], at most maxTokens-2
// pieces, [SEP]) and true when every word of t within those pieces is in the cache or is
// one it splits itself (a word of printable ASCII, see wordPiece; it is then kept). Else
// it returns false and, appended to missing, the words it lacks: tokenized alone and
// learnt, they let the next call answer. It returns false and no words when a word the
// cache does not keep (over 64 bytes) is among them: the text is the tokenizer's. t is as
// the tokenizer would get it (NUL bytes already removed).
func (w *WordCache) Encode(t string, maxTokens int, missing []string) ([]uint32, []string, bool) {
	ids := make([]uint32, 1, 64)
	ids[0] = w.cls
	limit := maxTokens - 1 // [CLS] and the pieces; [SEP] goes after them
	missing = missing[:0]
	var fresh []learnt // words split here, kept after the read lock
	long := false
	w.mu.RLock()
	for start, end := nextWord(t, 0); start >= 0; start, end = nextWord(t, end) {
		word := t[start:end]
		if p, ok := w.words[word]; ok {
			ids = append(ids, p...)
		} else if end-start > maxWordBytes {
			long = true
			break
		} else if p, ok := w.splitWord(word, ids); ok {
			fresh = append(fresh, learnt{word, p[len(ids):len(p):len(p)]})
			ids = p
		} else {
			missing = append(missing, word)
		}
		// A missing word has a piece or more (but for the rare word of control
		// characters alone, which the next call finds).
		if len(ids)+len(missing) >= limit {
			break
		}
	}
	w.mu.RUnlock()
	if len(fresh) > 0 {
		for i := range fresh {
			// Copies: ids may still grow over the pieces' backing array, and t is the
			// caller's.
			fresh[i] = learnt{strings.Clone(fresh[i].word), slices.Clone(fresh[i].pieces)}
		}
		w.splits.Add(uint64(w.keep(fresh)))
	}
	if long {
		return nil, nil, false
	}
	if len(missing) > 0 {
		return nil, missing, false
	}
	w.hits.Add(1)
	return append(ids[:min(len(ids), limit)], w.sep), nil, true
}

// splitWord appends word's pieces to ids when the cache splits such a word itself.
func (w *WordCache) splitWord(word string, ids []uint32) ([]uint32, bool) {
	if w.split == nil {
		return ids, false
	}
	return w.split.split(word, ids)
}

// learnt is a word and its pieces, to keep.
type learnt struct {
	word   string
	pieces []uint32
}

// Learn records the pieces of t's words from the tokenizer's answer for t: ids ([CLS], the
// pieces, [SEP], truncated to maxTokens) and each id's byte offsets in t. The word a
// truncation may have cut, and every word after it, teach nothing. If the offsets do not
// fall in t's words in order (the tests say they do), nothing is kept.
func (w *WordCache) Learn(t string, ids []uint32, offsets [][2]uint, maxTokens int) {
	if len(ids) < 2 || len(offsets) != len(ids) || ids[0] != w.cls || ids[len(ids)-1] != w.sep {
		return
	}
	seq, offs := ids[1:len(ids)-1], offsets[1:len(ids)-1]
	truncated := len(ids) >= maxTokens
	found := make([]learnt, 0, 32)
	k := 0 // the next piece
	for start, end := nextWord(t, 0); start >= 0; start, end = nextWord(t, end) {
		first := k
		for k < len(seq) && offs[k][0] < uint(end) {
			if offs[k][0] < uint(start) {
				return // a piece before its word: not the split assumed
			}
			k++
		}
		if k == len(seq) && truncated {
			break // this word may go on past the cut, and the words after it are not here
		}
		if end-start <= maxWordBytes {
			found = append(found, learnt{strings.Clone(t[start:end]), append([]uint32(nil), seq[first:k]...)})
		}
	}
	if k != len(seq) {
		return // pieces after the last word: not the split assumed
	}
	w.learnt.Add(uint64(w.keep(found)))
}

// keep adds words and their pieces (owned by the cache from now on) to the cache, but for a
// word learnt meanwhile by another text (or twice in one), and returns how many it added; a
// cache that would pass maxBytes starts again.
func (w *WordCache) keep(found []learnt) int {
	added := 0
	w.mu.Lock()
	for _, f := range found {
		if _, ok := w.words[f.word]; ok {
			continue // learnt meanwhile by another text
		}
		added++
		n := entryBytes(f.word, f.pieces)
		if w.bytes+n > maxBytes {
			w.words, w.bytes = map[string][]uint32{}, 0 // a new map: clear keeps the old one's slots
		}
		w.words[f.word] = f.pieces
		w.bytes += n
	}
	w.mu.Unlock()
	return added
}

// entryBytes is what a word and its pieces cost in the cache's map: the key and the ids,
// and 112 bytes of string and slice headers, map slot and allocation rounding (measured:
// 65,536 words of 8 bytes and 3 pieces take 8.0 MiB of heap).
func entryBytes(word string, pieces []uint32) int { return len(word) + 4*len(pieces) + 112 }

// nextWord returns the bounds of t's first word at or after byte from: a run of bytes
// between ASCII whitespace. start is -1 when there is none.
func nextWord(t string, from int) (start, end int) {
	start = -1
	for i := from; i < len(t); i++ {
		switch t[i] {
		case ' ', '\t', '\n', '\r':
			if start >= 0 {
				return start, i
			}
		default:
			if start < 0 {
				start = i
			}
		}
	}
	return start, len(t)
}
