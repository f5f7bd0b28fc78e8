package classifier

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The noise filters a model's manifest may name as the one its heads were trained behind
// (text_filter). NoiseFilter is FilterNoise, the one the training notebook exports;
// NoiseFilterV1 is FilterNoiseV1, for models exported before the trailer rule.
const (
	NoiseFilter   = "noise_words_v2"
	NoiseFilterV1 = "noise_words_v1"
)

// TextFilter returns the filter a manifest's text_filter names: nil for none (""), an
// error for a name this build does not know.
func TextFilter(name string) (func(string) string, error) {
	switch name {
	case "":
		return nil, nil
	case NoiseFilter:
		return FilterNoise, nil
	case NoiseFilterV1:
		return FilterNoiseV1, nil
	}
	return nil, fmt.Errorf("this build of Triage applies %q or %q, got %q", NoiseFilter, NoiseFilterV1, name)
}

// groupMax is the most words a bracketed tag may span, its opening and closing words
// included.
const groupMax = 8

// trailerKept is the most kept words a trailer may hold (see FilterNoise).
const trailerKept = 3

// FilterNoise drops the words of s that carry nothing for the fast/slow decision and
// returns the rest. The training notebook's
// twin is train/textfilter.py; classifier/testdata/noise_filter.jsonl holds the cases
// both must answer alike. The router applies it (FilterInput) for a model whose
// manifest names it (Manifest.TextFilter), before its cache, batcher and both stages.
//
// A word is a run of non-space runes (unicode.IsSpace). A word is noise when it holds an
// ASCII digit (numbers, ids, hex, uuids, versions, dates, "#4821"); "://" or "www."
// (ASCII case-insensitive): a URL; an '@' after its first byte with a '.' after it: an
// e-mail address; is a path (starts with "/", "~/", "./" or "../" and is not "/" alone,
// holds a backslash or two or more '/'); or looks like code (holds '_', '=', '{', '}' or
// "::", or an ASCII letter directly followed by '(': "print(", "camelCase(", and also
// "friend(s)", a known casualty). A bracketed tag is dropped whole: a word starting with
// '(' or '[' that it does not close itself, through the first of the next groupMax-1
// words that closes it (its end, before trailing ".,;:!?"), when the group holds at least
// one noise word and at most one other word (a label such as "ref" or "build").
//
// A trailer goes too: the words after the text's last sentence, when they are at most
// groupMax (as long as a bracketed tag may be) and the rules above drop at least one of
// them and keep at most trailerKept (3). That is the label left beside an
// identifier an application appended: "... in Paris? order 123456789", "... this. [build
// 3fa9b2c] ERROR at line 42", "... uuid d9653b8f-...". The last sentence ends at the last
// word, other than the text's final one, that the rules above keep and that ends with '?',
// '!' or '.' once closing quotes and brackets (" ' ) ] and U+201D, U+2019) are trimmed from
// it; a '.' ends one only after at least 4 runes holding no other '.', so "vs.", "No.",
// "U.S." and "e.g." do not. A text without such an ending has no trailer.
//
// Kept words are byte-identical, joined by one ASCII space: the tokenizer splits on
// whitespace, so their word pieces are those of the original spacing. When no word is
// dropped s is returned as it is (no allocation), and when every word would be, too: a
// text of noise only is classified as it came. Only ASCII digits count; other scripts'
// digits are words like any other.
//
// The consequence for the cache is intended: the same instruction with another ticket
// number, reference tag or URL is the same classifier input, one cache entry.
func FilterNoise(s string) string { return filterNoise(s, true) }

// FilterNoiseV1 is FilterNoise without the trailer rule: the filter a model whose manifest
// names NoiseFilterV1 was trained behind.
func FilterNoiseV1(s string) string { return filterNoise(s, false) }

func filterNoise(s string, trailer bool) string {
	var buf [64]wordSpan
	words := splitWords(s, buf[:0])
	dropped := 0
	for i := range words {
		if isNoiseWord(s[words[i].lo:words[i].hi]) {
			words[i].noise, words[i].drop = true, true
			dropped++
		}
	}
	for i := 0; i < len(words); i++ {
		w := s[words[i].lo:words[i].hi]
		closer := closerOf(w[0])
		if closer == 0 || closes(w[1:], closer) {
			continue
		}
		for j := i + 1; j < min(i+groupMax, len(words)); j++ {
			if !closes(s[words[j].lo:words[j].hi], closer) {
				continue
			}
			noise := 0
			for k := i; k <= j; k++ {
				if words[k].noise {
					noise++
				}
			}
			if noise >= 1 && j+1-i-noise <= 1 {
				for k := i; k <= j; k++ {
					if !words[k].drop {
						words[k].drop = true
						dropped++
					}
				}
				i = j
			}
			break
		}
	}
	if trailer && dropped > 0 {
		dropped += dropTrailer(s, words)
	}
	if dropped == 0 || dropped == len(words) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for _, w := range words {
		if w.drop {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(s[w.lo:w.hi])
	}
	return b.String()
}

// dropTrailer marks the words after the last sentence of s dropped when they are a trailer
// (see FilterNoise) and returns how many it newly marked.
func dropTrailer(s string, words []wordSpan) int {
	end := -1
	for k := len(words) - 2; k >= 0; k-- {
		if !words[k].drop && endsSentence(s[words[k].lo:words[k].hi]) {
			end = k
			break
		}
	}
	if end < 0 || len(words)-end-1 > groupMax {
		return 0
	}
	kept, anyDropped := 0, false
	for _, w := range words[end+1:] {
		if w.drop {
			anyDropped = true
		} else {
			kept++
		}
	}
	if !anyDropped || kept > trailerKept {
		return 0
	}
	for k := end + 1; k < len(words); k++ {
		words[k].drop = true
	}
	return kept
}

// endsSentence reports whether a word ends a sentence (see FilterNoise).
func endsSentence(w string) bool {
	for {
		if n := len(w); n > 0 && (w[n-1] == '"' || w[n-1] == '\'' || w[n-1] == ')' || w[n-1] == ']') {
			w = w[:n-1]
		} else if strings.HasSuffix(w, "\u201d") || strings.HasSuffix(w, "\u2019") {
			w = w[:len(w)-len("\u201d")]
		} else {
			break
		}
	}
	if strings.HasSuffix(w, "?") || strings.HasSuffix(w, "!") {
		return true
	}
	head, ok := strings.CutSuffix(w, ".")
	return ok && utf8.RuneCountInString(head) >= 4 && !strings.Contains(head, ".")
}

// wordSpan is one word of the filtered text: its byte range and the filter's verdicts.
type wordSpan struct {
	lo, hi      int
	noise, drop bool
}

// asciiSpace marks the ASCII bytes unicode.IsSpace reports as space.
var asciiSpace = [utf8.RuneSelf]bool{'\t': true, '\n': true, '\v': true, '\f': true, '\r': true, ' ': true}

// splitWords appends the spans of s's words (runs of non-space runes) to out.
func splitWords(s string, out []wordSpan) []wordSpan {
	start := -1
	for i := 0; i < len(s); {
		var space bool
		n := 1
		if c := s[i]; c < utf8.RuneSelf {
			space = asciiSpace[c]
		} else {
			var r rune
			r, n = utf8.DecodeRuneInString(s[i:])
			space = unicode.IsSpace(r)
		}
		if space {
			if start >= 0 {
				out = append(out, wordSpan{lo: start, hi: i})
				start = -1
			}
		} else if start < 0 {
			start = i
		}
		i += n
	}
	if start >= 0 {
		out = append(out, wordSpan{lo: start, hi: len(s)})
	}
	return out
}

// isNoiseWord reports whether one word carries no routing meaning (see FilterNoise), in
// one pass over its bytes.
func isNoiseWord(w string) bool {
	slashes, at := 0, -1
	for i := 0; i < len(w); i++ {
		switch c := w[i]; c {
		case '0', '1', '2', '3', '4', '5', '6', '7', '8', '9', '_', '=', '{', '}', '\\':
			return true
		case '/':
			slashes++
		case '(':
			if i > 0 && isASCIILetter(w[i-1]) {
				return true
			}
		case ':':
			if strings.HasPrefix(w[i+1:], ":") || strings.HasPrefix(w[i+1:], "//") {
				return true
			}
		case '@':
			if at < 0 {
				at = i
			}
		case '.':
			if at > 0 || (i >= 3 && w[i-3]|0x20 == 'w' && w[i-2]|0x20 == 'w' && w[i-1]|0x20 == 'w') {
				return true
			}
		}
	}
	if slashes >= 2 {
		return true
	}
	return w != "/" && (strings.HasPrefix(w, "/") || strings.HasPrefix(w, "~/") || strings.HasPrefix(w, "./") || strings.HasPrefix(w, "../"))
}

func isASCIILetter(c byte) bool { return c|0x20 >= 'a' && c|0x20 <= 'z' }

// closerOf is the byte that closes a tag opened by c, or 0 when c opens none.
func closerOf(c byte) byte {
	switch c {
	case '(':
		return ')'
	case '[':
		return ']'
	}
	return 0
}

// closes reports whether w ends with closer, trailing ".,;:!?" aside.
func closes(w string, closer byte) bool {
	w = strings.TrimRight(w, ".,;:!?")
	return len(w) > 0 && w[len(w)-1] == closer
}
