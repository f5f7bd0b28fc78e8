package router

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// normalizeRef and isNormalRef are normalize and isNormal as they were before their ASCII
// fast paths: the reference TestNormalizeMatchesReference and FuzzNormalize hold them to.

func normalizeRef(s string) string {
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

// isNormalRef reports whether normalizeRef(s) == s, without allocating.
func isNormalRef(s string) bool {
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
