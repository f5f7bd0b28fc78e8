package classifier

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// The filter as it was before its word spans were pooled and its splitter rewritten for
// speed: the reference FuzzFilterNoise holds the current one to, byte for byte.

func filterNoiseRef(s string, trailer bool) string {
	var buf [64]wordSpan
	words := splitWordsRef(s, buf[:0])
	dropped := 0
	for i := range words {
		if isNoiseWordRef(s[words[i].lo:words[i].hi]) {
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

// splitWordsRef appends the spans of s's words (runs of non-space runes) to out.
func splitWordsRef(s string, out []wordSpan) []wordSpan {
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

// isNoiseWordRef reports whether one word carries no routing meaning (see FilterNoise), in
// one pass over its bytes.
func isNoiseWordRef(w string) bool {
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
