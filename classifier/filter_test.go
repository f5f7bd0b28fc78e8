package classifier

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFilterNoiseParity checks FilterNoise against the cases the notebook's twin
// (train/textfilter.py, its test_textfilter.py) answers from the same file: unicode,
// punctuation runs, brackets, texts that filter to nothing.
func TestFilterNoiseParity(t *testing.T) {
	f, err := os.Open(filepath.Join("testdata", "noise_filter.jsonl"))
	require.NoError(t, err)
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var c struct{ In, Out string }
		require.NoError(t, json.Unmarshal(sc.Bytes(), &c))
		require.Equal(t, c.Out, FilterNoise(c.In), "input %q", c.In)
		require.Equal(t, c.Out, FilterNoise(c.Out), "filtering is idempotent: %q", c.Out)
		n++
	}
	require.NoError(t, sc.Err())
	require.GreaterOrEqual(t, n, 40)
}

func TestFilterNoise(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"clean text unchanged, spacing too", "Write  a poem\nabout the sea", "Write  a poem\nabout the sea"},
		{"ticket number", "Summarize this #4821", "Summarize this"},
		{"reference tag after", "Name three rivers (ref r1-false-c1-3fa9b2c1-8e2d-123)", "Name three rivers"},
		{"reference tag first", "[build 3fa9b2c] Name three rivers", "Name three rivers"},
		{"url, e-mail, path, code", "Fix https://x.io/a b@c.io /etc/hosts foo_bar(x) it", "Fix it"},
		{"two words kept in a tag", "(see figure 3) now", "(see figure now"},
		{"only noise: kept as it came", "12345  #4821", "12345  #4821"},
		{"digits of other scripts are words", "count ٣ things 3", "count ٣ things"},
		{"empty", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, FilterNoise(tc.in))
		})
	}
}

func TestFilterNoiseCleanTextDoesNotAllocate(t *testing.T) {
	s := strings.Repeat("Write a short story about a dragon who learns to bake bread. ", 4)
	require.Zero(t, testing.AllocsPerRun(100, func() { _ = FilterNoise(s) }))
}

func TestFilterInputFiltersTheInstructionOnly(t *testing.T) {
	in := FormatInput("Summarize this (ref r7-true-c2-00ff) ", " In 1969, 3 astronauts flew. ")
	require.Equal(t, "Summarize this [SEP] In 1969, 3 astronauts flew.", FilterInput(in))
	require.Equal(t, "Write a poem", FilterInput("Write a poem #4821"))
	require.Equal(t, "#4821", FilterInput("#4821"), "noise only: kept as it came")
	require.Equal(t, "Summarize [SEP] 12 34", FilterInput("Summarize [SEP] 12 34"))
	clean := "Write a poem [SEP] about 3 seas"
	require.Zero(t, testing.AllocsPerRun(100, func() { _ = FilterInput(clean) }))
}

// BenchmarkFilterNoise measures the filter on prompts as they arrive: a clean Dolly-like
// instruction (nothing dropped), the same with a reference tag and a URL, and a long
// prompt of about 190 words with numbers in it.
func BenchmarkFilterNoise(b *testing.B) {
	clean := "Write a short story about a dragon who learns to bake bread, in the style of a fairy tale for children."
	long := strings.Repeat("The Nile flows 6,650 km north through 11 countries into the Mediterranean Sea. ", 15)
	for _, bc := range []struct{ name, text string }{
		{"clean", clean},
		{"tag+url", clean + " (ref r1-false-c1-3fa9b2c1-8e2d-123) see https://docs.acme.io/a1b2c3/setup?id=42"},
		{"long", long},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = FilterNoise(bc.text)
			}
			b.ReportMetric(float64(len(strings.Fields(bc.text))), "words/text")
		})
	}
}

// FuzzFilterNoise: on any client text the filter returns the text itself or some of its
// words, in order, joined by one space, and filtering again changes nothing.
func FuzzFilterNoise(f *testing.F) {
	for _, s := range []string{"", "Write a poem #4821", "(ref r1-x-9) hi", "[a (b 1] c)", "\xff\xfe 1 x", "( ( ( 1", "a\u00a0b 1\u3000c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := FilterNoise(s)
		require.Equal(t, got, FilterNoise(got), "idempotent")
		if got == s {
			return
		}
		words := splitWords(s, nil)
		k := 0
		for _, w := range strings.Split(got, " ") {
			for k < len(words) && s[words[k].lo:words[k].hi] != w {
				k++
			}
			require.Less(t, k, len(words), "%q is not a word of %q in order", w, s)
			k++
		}
	})
}
