package sim

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestCountTokens(t *testing.T) {
	for text, want := range map[string]int{"": 0, "a": 1, "abcd": 1, "abcde": 2, "héllo": 2} {
		assert.Equal(t, want, CountTokens(text), text)
	}
}

func TestGeneratedText(t *testing.T) {
	got := GeneratedText("hello", 20)
	ws := strings.Split(got, " ")
	assert.Len(t, ws, 20)
	// Consecutive words follow the fixed list, wrapping after "papa".
	for i := 1; i < len(ws); i++ {
		prev, cur := indexOf(ws[i-1]), indexOf(ws[i])
		assert.Equal(t, (prev+1)%len(words), cur)
	}
	var joined strings.Builder
	for i := range 20 {
		joined.WriteString(Token("hello", i))
	}
	assert.Equal(t, got, joined.String())
	assert.Equal(t, got, GeneratedText("hello", 20), "deterministic")
	assert.NotEqual(t, Token("hello", 0), Token("hellp", 0), "depends on the prompt")
	assert.Equal(t, "", GeneratedText("x", 0))
}

func indexOf(w string) int {
	for i, x := range words {
		if x == w {
			return i
		}
	}
	return -1
}
