package classifier

import (
	"fmt"
	"strings"
	"sync"
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

// spanPool keeps word-span buffers between calls: a 16 KiB prompt has about 2,900 words,
// and growing a fresh slice for them each time cost more than reading them (allocation and
// the GC work it brings, BenchmarkFilterNoise/16KiB).
var spanPool = sync.Pool{New: func() any { return new([]wordSpan) }}

// maxPooledSpans bounds a buffer the pool keeps (about 1.5 MiB): a rare huge text's
// buffer is left to the GC.
const maxPooledSpans = 1 << 16

func filterNoise(s string, trailer bool) string {
	if len(s) <= 256 { // a short text's words fit buf, on the stack
		var buf [64]wordSpan
		return filterSpans(s, trailer, splitWords(s, buf[:0]))
	}
	pooled := spanPool.Get().(*[]wordSpan)
	words := splitWords(s, (*pooled)[:0])
	out := filterSpans(s, trailer, words)
	if cap(words) <= maxPooledSpans {
		*pooled = words[:0]
		spanPool.Put(pooled)
	}
	return out
}

// filterSpans is filterNoise on s's words.
func filterSpans(s string, trailer bool, words []wordSpan) string {
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
	// Kept words joined by one space: a run of kept words already one space apart in s is
	// copied whole.
	var b strings.Builder
	b.Grow(len(s))
	lo, hi := -1, -1 // the run being extended, s[lo:hi]
	for _, w := range words {
		if w.drop {
			continue
		}
		// One byte after the run, a space: no dropped word can sit between them.
		if lo >= 0 && w.lo == hi+1 && s[hi] == ' ' {
			hi = w.hi
			continue
		}
		if lo >= 0 {
			if b.Len() > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(s[lo:hi])
		}
		lo, hi = w.lo, w.hi
	}
	if lo >= 0 {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(s[lo:hi])
	}
	return b.String()
}

// dropTrailer marks the words after the last sentence of s dropped when they are a trailer
// (see FilterNoise) and returns how many it newly marked.
func dropTrailer(s string, words []wordSpan) int {
	// A sentence ending more than groupMax words before the last leaves no trailer, so
	// the search stops there rather than read a long text back to its start.
	end := -1
	for k := len(words) - 2; k >= max(0, len(words)-1-groupMax); k-- {
		if !words[k].drop && endsSentence(s[words[k].lo:words[k].hi]) {
			end = k
			break
		}
	}
	if end < 0 {
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

// splitWords appends the spans of s's words (runs of non-space runes) to out. Two tight
// loops, over the spaces and then over the word, each byte of ASCII one table lookup: a
// 16 KiB prompt is read at several hundred MB/s.
func splitWords(s string, out []wordSpan) []wordSpan {
	i := 0
	for {
		for i < len(s) { // spaces
			if c := s[i]; c < utf8.RuneSelf {
				if !asciiSpace[c] {
					break
				}
				i++
			} else if r, n := utf8.DecodeRuneInString(s[i:]); unicode.IsSpace(r) {
				i += n
			} else {
				break
			}
		}
		if i == len(s) {
			return out
		}
		start := i
		for i < len(s) { // the word
			if c := s[i]; c < utf8.RuneSelf {
				if asciiSpace[c] {
					break
				}
				i++
			} else if r, n := utf8.DecodeRuneInString(s[i:]); !unicode.IsSpace(r) {
				i += n
			} else {
				break
			}
		}
		out = append(out, wordSpan{lo: start, hi: i})
	}
}

// The bytes isNoiseWord looks at; every other byte is noiseNone, and costs one table load.
const (
	noiseNone   = iota
	noiseAlways // a digit, '_', '=', '{', '}', '\\'
	noiseSlash
	noiseParen
	noiseColon
	noiseAt
	noiseDot
)

var noiseClass = func() (t [256]uint8) {
	for _, c := range "0123456789_={}\\" {
		t[c] = noiseAlways
	}
	t['/'], t['('], t[':'], t['@'], t['.'] = noiseSlash, noiseParen, noiseColon, noiseAt, noiseDot
	return t
}()

// isNoiseWord reports whether one word carries no routing meaning (see FilterNoise), in
// one pass over its bytes.
func isNoiseWord(w string) bool {
	slashes, at := 0, -1
	for i := 0; i < len(w); i++ {
		switch noiseClass[w[i]] {
		case noiseNone:
		case noiseAlways:
			return true
		case noiseSlash:
			slashes++
		case noiseParen:
			if i > 0 && isASCIILetter(w[i-1]) {
				return true
			}
		case noiseColon:
			if strings.HasPrefix(w[i+1:], ":") || strings.HasPrefix(w[i+1:], "//") {
				return true
			}
		case noiseAt:
			if at < 0 {
				at = i
			}
		case noiseDot:
			if at > 0 || (i >= 3 && w[i-3]|0x20 == 'w' && w[i-2]|0x20 == 'w' && w[i-1]|0x20 == 'w') {
				return true
			}
		}
	}
	if slashes >= 2 {
		return true
	}
	if len(w) == 0 {
		return false
	}
	switch w[0] { // a path: "/x" (not "/" alone), "~/", "./", "../"
	case '/':
		return w != "/"
	case '~':
		return strings.HasPrefix(w, "~/")
	case '.':
		return strings.HasPrefix(w, "./") || strings.HasPrefix(w, "../")
	}
	return false
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
