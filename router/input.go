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
	for _, r := range s {
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

// isNormal reports whether normalize(s) == s, without allocating.
func isNormal(s string) bool {
	prevSpace := true // a leading space is not normal
	for i := 0; i < len(s); {
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
