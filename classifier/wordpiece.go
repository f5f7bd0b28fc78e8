package classifier

import (
	"fmt"
	"strings"
)

// wordPiece splits a word of printable ASCII into its BERT word pieces without the HF
// tokenizer, for the words WordCache has not seen. Calling the HF tokenizer through cgo
// costs 11 µs for a single word in a warm loop, and about 100 µs when the gateway has been
// idle for a few milliseconds (its code and tables out of the CPU's caches), which is the
// gateway's life at one client: that call was most of a cache miss's first stage. For such
// a word every step of the HF pipeline is simple enough to state in a few lines, and only
// such words are split here:
//
//   - BertNormalizer: clean_text drops control characters and handle_chinese_chars spaces
//     CJK ideographs (printable ASCII has neither), strip_accents changes no ASCII letter,
//     and lowercase (when set) maps A–Z to a–z.
//   - BertPreTokenizer: the word splits into runs of letters and digits, and every
//     punctuation character alone (all printable ASCII that is not a letter or a digit is
//     punctuation to it).
//   - WordPiece: each part is split greedily, longest piece first, pieces after the first
//     carrying the continuing prefix ("##"); a part longer than max_input_chars_per_word,
//     or one with a position no piece matches, is the unknown token alone.
//
// A word that holds an added token's first byte ('[' for BERT's [SEP]) is left to the
// tokenizer, which matches added tokens before it normalises. TestWordCacheSplitsLikeTheTokenizer
// and TestWordCacheIsExact (package onnx) hold this to the HF tokenizer on every word of the
// Dolly data and on words built to sit on its edges, and FuzzWordCache on fuzzed ones.
type wordPiece struct {
	first, cont map[string]uint32 // the vocabulary: word-initial pieces, and "##" pieces without the prefix
	unk         uint32
	maxChars    int
	lowercase   bool
	deferByte   [128]bool // bytes that send a word to the tokenizer
}

// wordPieceModel is the part of tokenizer.json's model that wordPiece reads.
type wordPieceModel struct {
	Vocab         map[string]uint32 `json:"vocab"`
	UnkToken      string            `json:"unk_token"`
	ContinuingPfx *string           `json:"continuing_subword_prefix"`
	MaxInputChars int               `json:"max_input_chars_per_word"`
}

// newWordPiece builds the splitter from the model's vocabulary, whether the normaliser
// lowercases, and the added tokens' contents. It fails for a model this package cannot
// split like the tokenizer (no unknown token in the vocabulary, say); WordCache then leaves
// every new word to the tokenizer.
func newWordPiece(m wordPieceModel, lowercase bool, added []string) (*wordPiece, error) {
	unk, ok := m.Vocab[m.UnkToken]
	if !ok {
		return nil, fmt.Errorf("unknown token %q is not in the vocabulary", m.UnkToken)
	}
	if m.MaxInputChars <= 0 {
		return nil, fmt.Errorf("max_input_chars_per_word %d", m.MaxInputChars)
	}
	prefix := "##"
	if m.ContinuingPfx != nil {
		prefix = *m.ContinuingPfx
	}
	if prefix == "" {
		return nil, fmt.Errorf("no continuing subword prefix")
	}
	wp := &wordPiece{first: map[string]uint32{}, cont: map[string]uint32{}, unk: unk,
		maxChars: m.MaxInputChars, lowercase: lowercase}
	for tok, id := range m.Vocab {
		if rest, ok := strings.CutPrefix(tok, prefix); ok {
			wp.cont[rest] = id
		}
		// The tokenizer tries a word's first piece as it is, so "##ing" is also a
		// first piece (of the text "##ing").
		wp.first[tok] = id
	}
	for _, a := range added {
		if a == "" {
			continue
		}
		c := a[0]
		if c >= 128 {
			continue // a word of printable ASCII cannot hold it
		}
		wp.deferByte[c] = true
		if lowercase && c >= 'a' && c <= 'z' {
			wp.deferByte[c-'a'+'A'] = true
		}
	}
	return wp, nil
}

// split appends the pieces of word (whole, as WordCache keeps it: no whitespace) to dst and
// returns true, or returns false for a word it leaves to the tokenizer (a byte outside
// printable ASCII, or an added token's first byte).
func (wp *wordPiece) split(word string, dst []uint32) ([]uint32, bool) {
	var buf [maxWordBytes]byte
	if len(word) > len(buf) {
		return dst, false
	}
	for i := 0; i < len(word); i++ {
		c := word[i]
		if c <= ' ' || c >= 0x7f || wp.deferByte[c] {
			return dst, false
		}
		if wp.lowercase && c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf[i] = c
	}
	w := buf[:len(word)]
	for start := 0; start < len(w); {
		end := start + 1
		if isAlnum(w[start]) {
			for end < len(w) && isAlnum(w[end]) {
				end++
			}
		}
		dst = wp.part(w[start:end], dst)
		start = end
	}
	return dst, true
}

// part appends the pieces of one pre-token (a run of letters and digits, or one punctuation
// character), as WordPiece splits it.
func (wp *wordPiece) part(p []byte, dst []uint32) []uint32 {
	if len(p) > wp.maxChars {
		return append(dst, wp.unk)
	}
	n := len(dst)
	for start := 0; start < len(p); {
		vocab := wp.first
		if start > 0 {
			vocab = wp.cont
		}
		end := len(p)
		for ; end > start; end-- {
			if id, ok := vocab[string(p[start:end])]; ok {
				dst = append(dst, id)
				break
			}
		}
		if end == start {
			return append(dst[:n], wp.unk)
		}
		start = end
	}
	return dst
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}
