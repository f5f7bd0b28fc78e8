package classifier

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Tokens are usable only by the tokenizer that made them; the zero value by none.
func TestTokensBelongToTheirTokenizer(t *testing.T) {
	tk := NewTokens([]uint32{101, 7592, 102}, "tok-a/256")
	require.Equal(t, 3, tk.Len())
	ids, ok := tk.IDsFor("tok-a/256")
	require.True(t, ok)
	require.Equal(t, []uint32{101, 7592, 102}, ids)
	_, ok = tk.IDsFor("tok-a/128")
	require.False(t, ok, "another truncation")
	_, ok = Tokens{}.IDsFor("")
	require.False(t, ok, "the zero Tokens")
	_, ok = NewTokens(nil, "tok-a/256").IDsFor("tok-a/256")
	require.False(t, ok, "no ids")
}
