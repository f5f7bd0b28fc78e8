package onnx

import (
	"bufio"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/classifier"
)

// wordCacheEdges are texts built to sit on the word cache's edges: added tokens in and
// around words, control characters inside and between words (\v and \f are no word
// boundary: BERT drops them), whitespace other than ASCII's (a boundary for BERT, not for
// the cache), combining marks after a space, punctuation runs, words at and over the
// cache's 64 bytes and WordPiece's 100 characters, ## in the text, CJK and emoji.
var wordCacheEdges = []string{
	"[SEP]", "a [SEP] b", "abc[SEP]def", "[[SEP]]", "[sep] [Sep]", "[SEP[SEP]", "[SE\x01P]",
	"[CLS] [PAD] [MASK] [UNK] text", "[MASKED] [UNKNOWN] [] [ ] ]]] [[[", "trailing [",
	"a\x01b c\x7fd e\x0bf g\x0ch", "\x01", "\x1c\x1d\x1e\x1f words", "tab\tcr\rlf\nspace  end",
	"don't won't it's U.S.A. e.g. i.e.", "##abc ###x #", "!!!???...;;;,,, --- ___",
	"C++ C# F# .NET node.js 3.14159 1,000,000 50% $5 #4821",
	"https://example.com/a/b?c=d&e=f#g user@example.org",
	"(ref r1-false-c1-3fa9b2c1-8e2d-123) d9653b8f-5c2e-4b4e-9f0e-3a7f3c2d1e0f",
	strings.Repeat("x", 100) + " " + strings.Repeat("y", 101) + " short",
	strings.Repeat("ab", 50) + "c " + strings.Repeat("Q", 99),
	"MiXeD CaSe WORDS Words words", "supercalifragilisticexpialidocious antidisestablishmentarianism",
	"Café naïve résumé", "人工智能 AI 人工智能", "emoji 🙂 here", "zero\u200bwidth",
	"nb\u00a0sp ideo\u3000space en\u2002space", "e\u0301 \u0301x \u0301 a\u0301\u0327", "ΣΟΦΙΑΣ σοφός ς",
	"“curly” ‘quotes’ — dash … ellipsis", "x\u0085y \u2028 \u2029", "\ufffd replacement \ufffd",
	"Ǆ ǅ ǆ İ ß ﬁ", "\x01\x02 \x03", " leading and trailing ", "a\r\n\r\nb",
	strings.Repeat("word ", 400), strings.Repeat("[SEP] ", 300), strings.Repeat("a,", 300),
}

// TestWordCacheIsExact holds the word cache to the HF tokenizer: every text of the Dolly
// sets (the four training categories as instruction [SEP] context, their instructions and
// contexts alone, rows joined to long prompts) and the edge texts is tokenized through
// encode twice, the second time mostly from the cache, and must get exactly the ids the
// tokenizer gives the whole text.
func TestWordCacheIsExact(t *testing.T) {
	c := newTestClassifier(t, "")
	require.NotNil(t, c.words, "MiniLM's tokenizer.json is one the word cache reproduces")
	whole := func(s string) []uint32 { return c.tok.EncodeWithOptions(strings.ReplaceAll(s, "\x00", ""), true).IDs }

	dolly := dollyTexts(t, 2000)
	texts := slices.Clone(dolly)
	for _, s := range dolly {
		ins, ctx, _ := strings.Cut(s, classifier.Separator)
		texts = append(texts, ins)
		if ctx != "" {
			texts = append(texts, ctx)
		}
	}
	rng := rand.New(rand.NewPCG(3, 5))
	for range 100 {
		var b strings.Builder
		for b.Len() < 4<<10 {
			b.WriteString(dolly[rng.IntN(len(dolly))])
			b.WriteString(" ")
		}
		texts = append(texts, b.String())
	}
	texts = append(texts, wordCacheEdges...)

	ascii := 0 // texts of words the cache keeps
	for _, s := range texts {
		if !hasLongWord(s) {
			ascii++
		}
	}
	// Both ways a new word gets its pieces: split by the cache itself (printable ASCII), or
	// learnt from the tokenizer's answer for the words joined.
	for _, mode := range []string{"split", "learn"} {
		c.words = mustWordCache(t, c)
		if mode == "learn" {
			c.words.LearnOnly()
		}
		for pass := range 2 {
			st0 := c.words.Stats()
			for i, s := range texts {
				got, err := c.encode(s)
				require.NoError(t, err, "text %d", i)
				require.Equal(t, whole(s), got, "%s, pass %d, text %d: %q", mode, pass, i, s)
			}
			st1 := c.words.Stats()
			h0, h1, s0, s1 := st0.Answered, st1.Answered, st0.Split, st1.Split
			t.Logf("%s, pass %d: %d of %d texts (%d without a word over 64 bytes) answered by the word cache, %d new words split by it",
				mode, pass, h1-h0, len(texts), ascii, s1-s0)
			switch {
			case pass == 1:
				// Every text was learnt in pass 0 but those a word over 64 bytes keeps out.
				require.GreaterOrEqual(t, h1-h0, uint64(ascii), "the second pass must come from the cache")
			case mode == "split":
				require.Greater(t, s1-s0, uint64(10000), "the cache splits the Dolly words itself")
			default:
				require.Zero(t, s1-s0)
			}
		}
	}

	// Concurrent readers and learners (Tokenize holds c.mu): the race detector's part.
	want := make([][]uint32, len(dolly))
	for i, s := range dolly {
		want[i] = whole(s)
	}
	c.words = mustWordCache(t, c)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := g; i < len(dolly); i += 2 {
				tk, err := c.Tokenize(dolly[i])
				if err != nil {
					t.Error(err)
					return
				}
				ids, _ := tk.IDsFor(c.tokID)
				if !slices.Equal(ids, want[i]) {
					t.Errorf("text %d: ids differ under concurrency", i)
					return
				}
			}
		})
	}
	wg.Wait()
}

// mustWordCache is a fresh, empty word cache for c's tokenizer.
func mustWordCache(t testing.TB, c *Classifier) *classifier.WordCache {
	t.Helper()
	raw := readTokenizerJSON(t, c)
	w, err := classifier.NewWordCache(raw)
	require.NoError(t, err)
	return w
}

// FuzzWordCache: for any text, encode through the word cache, with the text's words first
// learnt in another text (the same words in reverse order), then with them learnt from the
// text itself, gives what the HF tokenizer gives the whole text; both with the cache
// splitting words of printable ASCII itself and with it learning every word from the
// tokenizer.
func FuzzWordCache(f *testing.F) {
	for _, s := range wordCacheEdges {
		f.Add(s)
	}
	f.Add("Name three birds. (ref r1-false-c1-3fa9b2c1-8e2d-123)")
	f.Add("Summarize this. [SEP] The quick brown fox jumps over the lazy dog.")
	c := newTestClassifier(f, "")
	splitting, learning := c.words, mustWordCache(f, c)
	learning.LearnOnly()
	space := func(r rune) bool { return r == ' ' || r == '\t' || r == '\n' || r == '\r' }
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return
		}
		s = strings.ReplaceAll(s, "\x00", "")
		if strings.TrimSpace(s) == "" {
			return
		}
		want := c.tok.EncodeWithOptions(s, true).IDs
		ws := strings.FieldsFunc(s, space)
		slices.Reverse(ws)
		for _, wc := range []*classifier.WordCache{splitting, learning} {
			c.words = wc
			if other := strings.Join(ws, " "); strings.TrimSpace(other) != "" {
				if _, err := c.encode(other); err != nil {
					t.Fatal(err)
				}
			}
			for _, what := range []string{"words learnt elsewhere", "words learnt here"} {
				got, err := c.encode(s)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got, want) {
					t.Fatalf("%s (learning only: %v): encode %v, tokenizer %v for %q", what, wc == learning, got, want, s)
				}
			}
		}
	})
}

// hasLongWord reports whether s has a word (bytes between ASCII whitespace) longer than
// the cache keeps.
func hasLongWord(s string) bool {
	for _, w := range strings.FieldsFunc(s, func(r rune) bool { return r == ' ' || r == '\t' || r == '\n' || r == '\r' }) {
		if len(w) > 64 {
			return true
		}
	}
	return false
}

// readTokenizerJSON is c's tokenizer.json as packaged.
func readTokenizerJSON(t testing.TB, c *Classifier) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(c.cfg.EncoderDir, c.manifest.Encoder.TokenizerFile))
	require.NoError(t, err)
	return raw
}

// TestWordCacheSplitsLikeTheTokenizer holds the word cache's own splitting (the words of
// printable ASCII it splits without the tokenizer) to the HF tokenizer word by word: every
// distinct word of the Dolly data (instructions, contexts and responses of all eight
// categories), 20,000 random words of printable ASCII weighted towards punctuation, digits
// and capitals, and words built on WordPiece's edges. Each is given alone to a cache that
// has not seen it, which must answer without the tokenizer and with the tokenizer's ids.
func TestWordCacheSplitsLikeTheTokenizer(t *testing.T) {
	c := newTestClassifier(t, "")
	raw := readTokenizerJSON(t, c)
	words := map[string]bool{}
	f, err := os.Open(filepath.Join(repo, "../shared/datasets/dolly-15k-dev.jsonl"))
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var r struct{ Instruction, Context, Response string }
		require.NoError(t, json.Unmarshal(sc.Bytes(), &r))
		for _, w := range strings.Fields(r.Instruction + " " + r.Context + " " + r.Response) {
			words[w] = true
		}
	}
	require.NoError(t, sc.Err())
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789" +
		"!\"#$%&'()*+,-./:;<=>?@\\]^_`{|}~##..--''"
	rng := rand.New(rand.NewPCG(7, 11))
	for range 20000 {
		b := make([]byte, 1+rng.IntN(24))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		words[string(b)] = true
	}
	for _, w := range []string{"##ing", "#", "##", "unaffable", "UNAFFABLE", "xqzjv", "xqzjving",
		"a1b2c3", "3.14159", "1,000,000", "$5", "50%", "e.g.", "U.S.A.", "don't", "C++", "node.js",
		"https://example.com/a?b=c", "r1-false-c1-3fa9b2c1-8e2d-123)", strings.Repeat("z", 64),
		strings.Repeat("ab", 32), strings.Repeat("9", 64), "~~~", "@user", "<tag>", "\\n", "`code`"} {
		words[w] = true
	}
	wc, err := classifier.NewWordCache(raw)
	require.NoError(t, err)
	split, skipped := 0, 0
	for w := range words { // distinct: each is new to wc
		if len(w) > 64 || strings.ContainsFunc(w, func(r rune) bool { return r < '!' || r > '~' || r == '[' }) {
			skipped++ // not a word the cache splits: the tokenizer's, as TestWordCacheIsExact checks
			continue
		}
		got, missing, ok := wc.Encode(w, 512, nil)
		require.True(t, ok, "%q: the cache splits a word of printable ASCII itself (missing %q)", w, missing)
		require.Equal(t, c.tok.EncodeWithOptions(w, true).IDs, got, "%q", w)
		split++
	}
	t.Logf("%d words split as the tokenizer splits them; %d left to the tokenizer", split, skipped)
	require.Greater(t, split, 60000)
}
