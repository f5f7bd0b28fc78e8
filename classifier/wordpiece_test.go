package classifier

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// splitterJSON is bertJSON with a vocabulary WordPiece can split with: an unknown token,
// a few words and "##" pieces.
var splitterJSON = strings.Replace(bertJSON, `"vocab": {"[PAD]": 0, "[CLS]": 101, "[SEP]": 102}`,
	`"unk_token": "[UNK]", "continuing_subword_prefix": "##", "max_input_chars_per_word": 10,
	 "vocab": {"[PAD]": 0, "[UNK]": 100, "[CLS]": 101, "[SEP]": 102,
	   "un": 1, "##aff": 2, "##able": 3, "una": 4, "##ff": 5, "play": 6, "##ing": 7, ",": 8, "'": 9,
	   "s": 10, "##s": 11, "3": 12, "##14": 13, ".": 14, "#": 15, "ing": 16, "aaaaaaaaaa": 17}`, 1)

func TestWordCacheSplitsWordsItself(t *testing.T) {
	w, err := NewWordCache([]byte(splitterJSON))
	require.NoError(t, err)
	for text, want := range map[string][]uint32{
		"unaffable":    {4, 5, 3},     // longest first piece "una", then "##ff", "##able"
		"UnAffable":    {4, 5, 3},     // lowercased
		"playing,":     {6, 7, 8},     // punctuation is a word of its own
		"play's":       {6, 9, 10},    // a piece after punctuation is word-initial
		"plays":        {6, 11},       //
		"3.14":         {12, 14, 100}, // "14" has no word-initial piece: [UNK] for the part
		"##ing":        {15, 15, 16},  // '#' is punctuation
		"playx":        {100},         // no piece for "x": the part is [UNK] alone
		"aaaaaaaaaa":   {17},          // 10 characters: max_input_chars_per_word
		"aaaaaaaaaaa":  {100},         // 11: too long for WordPiece
		"un,play":      {1, 8, 6},     //
		"play playing": {6, 6, 7},     // two words
	} {
		ids, missing, ok := w.Encode(text, 256, nil)
		require.True(t, ok, "%q: missing %q", text, missing)
		require.Equal(t, append(append([]uint32{101}, want...), 102), ids, "%q", text)
	}
	// A word that may hold an added token, or a byte outside printable ASCII, is the
	// tokenizer's.
	for _, word := range []string{"[SEP]", "a[b", "café", "a\x01b", "a\x7fb"} {
		_, missing, ok := w.Encode("play "+word, 256, nil)
		require.False(t, ok, "%q", word)
		require.Equal(t, []string{word}, missing)
	}
	split := w.Stats().Split
	require.Equal(t, uint64(13), split)
	// What it split it kept: a text of those words is read from the cache.
	ids, _, ok := w.Encode("UnAffable playing,", 256, nil)
	require.True(t, ok)
	require.Equal(t, []uint32{101, 4, 5, 3, 6, 7, 8, 102}, ids)
	require.Equal(t, split, w.Stats().Split)
	// Truncated within a word it split: the text's first pieces, [SEP] last.
	ids, _, ok = w.Encode("unaffable", 3, nil)
	require.True(t, ok)
	require.Equal(t, []uint32{101, 4, 102}, ids)
}

func TestWordCacheSplitsOnlyWithAModelItCanFollow(t *testing.T) {
	for name, edit := range map[string][2]string{
		"no unknown token in the vocabulary":                   {`"[UNK]": 100, `, ``},
		"no max_input_chars_per_word":                          {`"max_input_chars_per_word": 10,`, ``},
		"no continuing prefix":                                 {`"continuing_subword_prefix": "##"`, `"continuing_subword_prefix": ""`},
		"a normaliser that does not say whether it lowercases": {`, "lowercase": true`, ``},
	} {
		raw := strings.Replace(splitterJSON, edit[0], edit[1], 1)
		require.NotEqual(t, splitterJSON, raw, name)
		w, err := NewWordCache([]byte(raw))
		require.NoError(t, err, name)
		_, missing, ok := w.Encode("play", 256, nil)
		require.False(t, ok, name)
		require.Equal(t, []string{"play"}, missing, name)
	}
	// Without lowercase, capitals stay: "Play" is no piece.
	w, err := NewWordCache([]byte(strings.Replace(splitterJSON, `"lowercase": true`, `"lowercase": false`, 1)))
	require.NoError(t, err)
	ids, _, ok := w.Encode("Play play", 256, nil)
	require.True(t, ok)
	require.Equal(t, []uint32{101, 100, 6, 102}, ids)
}
