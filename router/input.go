package router

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/triage-gw/triage/classifier"
)

// Input builds the classifier's input for one request: the instruction alone, or
// "instruction [SEP] context" when there is a context, with whitespace normalised (see
// normalize). Every front end must build it here. The router then drops the instruction's
// noise words when the model was trained behind the noise filter (see Filtered); the
// filtered text is the one the cache is keyed by and the batcher deduplicates on.
func Input(instruction, context string) string {
	return normalize(classifier.FormatInput(instruction, context))
}

// normalize trims s and collapses every run of Unicode whitespace into one ASCII space.
// The classifier's tokenizer splits on whitespace, so texts that differ only in spacing are
// the same model input; normalising before the cache lookup and before classification makes
// them share one cache entry and one batcher slot, and the cached value is exactly the
// model's output for the key's text.
func normalize(s string) string {
	if isNormal(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	space := false
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if asciiSpace[c] {
				space = b.Len() > 0
				i++
				continue
			}
			if space {
				b.WriteByte(' ')
				space = false
			}
			// The run of ASCII that is already normal (single ' ' between words) is
			// copied whole.
			j := i + 1
			for j < len(s) && s[j] < utf8.RuneSelf {
				if !asciiSpace[s[j]] {
					j++
				} else if s[j] == ' ' && j+1 < len(s) && s[j+1] < utf8.RuneSelf && !asciiSpace[s[j+1]] {
					j += 2
				} else {
					break
				}
			}
			b.WriteString(s[i:j])
			i = j
			continue
		}
		// As range does: an invalid byte is one utf8.RuneError, written as U+FFFD.
		r, n := utf8.DecodeRuneInString(s[i:])
		i += n
		if unicode.IsSpace(r) {
			space = b.Len() > 0
			continue
		}
		if space {
			b.WriteByte(' ')
			space = false
		}
		b.WriteRune(r)
	}
	return b.String()
}

// asciiSpace marks the ASCII bytes unicode.IsSpace reports as space; spaceBit is the same
// as 0 or 1, and notBlank is 1 for every byte but ' '.
var (
	asciiSpace = [utf8.RuneSelf]bool{'\t': true, '\n': true, '\v': true, '\f': true, '\r': true, ' ': true}
	spaceBit   = func() (t [256]uint8) {
		for c, sp := range asciiSpace {
			if sp {
				t[c] = 1
			}
		}
		return t
	}()
	notBlank = func() (t [256]uint8) {
		for c := range t {
			t[c] = 1
		}
		t[' '] = 0
		return t
	}()
)

// isNormal reports whether normalize(s) == s, without allocating. An ASCII byte costs one
// table load: a 16 KiB prompt is checked in a few microseconds (it was 0.1 ms).
func isNormal(s string) bool {
	prevSpace := true // a leading space is not normal
	for i := 0; i < len(s); {
		if s[i] < utf8.RuneSelf {
			// A run of ASCII without branches on the text: a space is wrong when it is
			// not ' ' or follows a space.
			var bad, prev uint8
			if prevSpace {
				prev = 1
			}
			// 64 bytes at most at a time, so that a text that is not normal stops early.
			j, end := i, min(i+64, len(s))
			for ; j < end && s[j] < utf8.RuneSelf; j++ {
				c := s[j]
				sp := spaceBit[c]
				bad |= sp & (notBlank[c] | prev)
				prev = sp
			}
			if bad != 0 {
				return false
			}
			prevSpace, i = prev == 1, j
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			return false // let the slow path rewrite it like range does
		}
		sp := unicode.IsSpace(r)
		if sp && (r != ' ' || prevSpace) {
			return false
		}
		prevSpace = sp
		i += n
	}
	return !prevSpace || s == ""
}

// InputWithin is Input for a text of any length, cut to at most n bytes (n >= 4): the
// classifier reads only the first max_tokens word pieces of its input, so the rest of a long
// text is not read at all. Leading whitespace goes first, and each part is read up to four
// times n (normalising only shrinks runs of whitespace, so only a text mostly of whitespace
// ends short of n); the normalised input is then cut at its last space within n bytes (on a
// rune boundary when they hold one word), and a context separator left dangling at the end
// is dropped.
func InputWithin(instruction, context string, n int) string {
	ci := headBytes(strings.TrimLeftFunc(instruction, unicode.IsSpace), 4*n)
	cc := headBytes(context, 4*n)
	return cutInput(Input(ci, cc), n)
}

// headBytes is s cut to at most n bytes, on a rune boundary.
func headBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// cutInput cuts a normalised classifier input (single ASCII spaces between words) to at most
// n bytes: at its last space within them, so no word is cut through, or on a rune boundary
// when they hold a single word. A cut that would leave the context's separator dangling at
// the end drops it, so the cut text does not claim a context it no longer carries.
func cutInput(in string, n int) string {
	if len(in) <= n {
		return in
	}
	cut := headBytes(in, n)
	if in[len(cut)] != ' ' { // the last word is cut through: drop it, unless it is the only one
		if i := strings.LastIndexByte(cut, ' '); i > 0 {
			cut = cut[:i]
		}
	}
	cut = strings.TrimRight(cut, " ")
	return strings.TrimSuffix(cut, strings.TrimRight(classifier.Separator, " "))
}
