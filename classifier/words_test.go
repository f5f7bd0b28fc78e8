package classifier

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// bertJSON is the shape of a BERT tokenizer.json, as NewWordCache reads it (the real one,
// and the word cache's agreement with the real tokenizer, are tested in package onnx).
const bertJSON = `{
  "added_tokens": [{"id": 0, "content": "[PAD]"}, {"id": 101, "content": "[CLS]"}, {"id": 102, "content": "[SEP]"}],
  "normalizer": {"type": "BertNormalizer", "lowercase": true},
  "pre_tokenizer": {"type": "BertPreTokenizer"},
  "post_processor": {"type": "TemplateProcessing", "single": [
    {"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
    {"SpecialToken": {"id": "[SEP]", "type_id": 0}}]},
  "model": {"type": "WordPiece", "vocab": {"[PAD]": 0, "[CLS]": 101, "[SEP]": 102}}
}`

func TestNewWordCacheRefusesOtherTokenizers(t *testing.T) {
	_, err := NewWordCache([]byte(bertJSON))
	require.NoError(t, err)
	for name, edit := range map[string][2]string{
		"byte-level BPE":              {`"type": "WordPiece"`, `"type": "BPE"`},
		"another normaliser":          {`"type": "BertNormalizer"`, `"type": "NFKC"`},
		"another pre-splitter":        {`"type": "BertPreTokenizer"`, `"type": "ByteLevel"`},
		"no [CLS] first":              {`{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, `, ``},
		"an added token with a space": {`"content": "[PAD]"`, `"content": "<pad token>"`},
	} {
		_, err := NewWordCache([]byte(strings.Replace(bertJSON, edit[0], edit[1], 1)))
		require.Error(t, err, name)
	}
	_, err = NewWordCache([]byte(`{`))
	require.Error(t, err)
}

// offsetsOf gives each piece the bounds of the word it came from (what the tokenizer's
// offsets say, coarsely): words[i] has n[i] pieces.
func offsetsOf(t string, n []int) [][2]uint {
	offs := [][2]uint{{0, 0}}
	i := 0
	for start, end := nextWord(t, 0); start >= 0; start, end = nextWord(t, end) {
		for range n[i] {
			offs = append(offs, [2]uint{uint(start), uint(end)})
		}
		i++
	}
	return append(offs, [2]uint{0, 0})
}

func TestWordCacheLearnsAndAnswers(t *testing.T) {
	w, err := NewWordCache([]byte(bertJSON))
	require.NoError(t, err)
	_, missing, ok := w.Encode("play ball", 256, nil)
	require.False(t, ok)
	require.Equal(t, []string{"play", "ball"}, missing)

	// "play" is one piece, "ball" two; \t and \r\n are word boundaries, \v is not.
	w.Learn("play\tball\r\n", []uint32{101, 7, 8, 9, 102}, offsetsOf("play\tball\r\n", []int{1, 2}), 256)
	_, missing, ok = w.Encode(" ball play\vx ball play ", 256, nil)
	require.False(t, ok)
	require.Equal(t, []string{"play\vx"}, missing, "one word the cache has not seen")
	ids, _, ok := w.Encode(" ball play  ball\nplay ", 256, nil)
	require.True(t, ok)
	require.Equal(t, []uint32{101, 8, 9, 7, 8, 9, 7, 102}, ids)

	// Truncated: [CLS], maxTokens-2 pieces, [SEP].
	ids, _, ok = w.Encode("ball ball ball", 6, nil)
	require.True(t, ok)
	require.Equal(t, []uint32{101, 8, 9, 8, 9, 102}, ids)
	ids, _, ok = w.Encode("ball ball ball", 5, nil)
	require.True(t, ok)
	require.Equal(t, []uint32{101, 8, 9, 8, 102}, ids)

	// A word over 64 bytes is the tokenizer's: no answer, and no words to learn.
	long := strings.Repeat("x", maxWordBytes+1)
	_, missing, ok = w.Encode("play "+long, 256, nil)
	require.False(t, ok)
	require.Empty(t, missing)
	st := w.Stats()
	require.Equal(t, uint64(3), st.Answered)
	require.Zero(t, st.Split, "no [UNK] in this vocabulary: no splitter")
	require.Equal(t, uint64(2), st.Learnt) // play and ball
	require.Equal(t, 2, st.Words)
	w.NoteWhole()
	require.Equal(t, uint64(1), w.Stats().Whole)
}

func TestWordCacheLearnsOnlyWhatTheAnswerShows(t *testing.T) {
	w, err := NewWordCache([]byte(bertJSON))
	require.NoError(t, err)
	// Truncated (4 ids = maxTokens): "one" is whole, "two" may be cut, "three" is not there.
	w.Learn("one two three", []uint32{101, 1, 2, 102}, offsetsOf("one two three", []int{1, 1, 0}), 4)
	_, missing, _ := w.Encode("one two three", 256, nil)
	require.Equal(t, []string{"two", "three"}, missing)

	// Offsets out of order (a piece before its word): nothing is kept.
	w2, _ := NewWordCache([]byte(bertJSON))
	w2.Learn("aa bb", []uint32{101, 1, 2, 102}, [][2]uint{{0, 0}, {3, 5}, {0, 2}, {0, 0}}, 256)
	_, missing, _ = w2.Encode("aa bb", 256, nil)
	require.Equal(t, []string{"aa", "bb"}, missing)

	// Fewer words than pieces account for: nothing is kept.
	w2.Learn("aa", []uint32{101, 1, 2, 102}, [][2]uint{{0, 0}, {0, 2}, {5, 6}, {0, 0}}, 256)
	_, missing, _ = w2.Encode("aa", 256, nil)
	require.Equal(t, []string{"aa"}, missing)

	// Truncated, with pieces past the text's last word: nothing is kept either.
	w2.Learn("aa", []uint32{101, 1, 2, 102}, [][2]uint{{0, 0}, {0, 2}, {5, 6}, {0, 0}}, 4)
	_, missing, _ = w2.Encode("aa", 256, nil)
	require.Equal(t, []string{"aa"}, missing)

	// Not the tokenizer's frame ([CLS] … [SEP]): ignored.
	w2.Learn("aa", []uint32{1, 102}, [][2]uint{{0, 2}, {0, 0}}, 256)
	_, missing, _ = w2.Encode("aa", 256, nil)
	require.Equal(t, []string{"aa"}, missing)

	// A word of control characters alone has no pieces, and is known as such.
	w2.Learn("\x01 aa", []uint32{101, 1, 102}, [][2]uint{{0, 0}, {2, 4}, {0, 0}}, 256)
	ids, _, ok := w2.Encode("aa \x01 aa", 256, nil)
	require.True(t, ok)
	require.Equal(t, []uint32{101, 1, 1, 102}, ids)
}

func TestWordCacheStaysWithinItsBytes(t *testing.T) {
	w, err := NewWordCache([]byte(bertJSON))
	require.NoError(t, err)
	word := func(i int) string {
		return strings.Repeat("w", 8) + string(rune('a'+i%26)) + strings.Repeat("z", i/26%40)
	}
	n := 0
	for i := range 200_000 {
		s := word(i) + "q" + string(rune('0'+i%10)) + string(rune('a'+i/10%26)) + string(rune('a'+i/260%26)) + string(rune('a'+i/6760%26))
		w.Learn(s, []uint32{101, 5, 6, 102}, offsetsOf(s, []int{2}), 256)
		require.LessOrEqual(t, w.bytes, maxBytes)
		n = len(w.words)
	}
	require.Positive(t, n)
}
