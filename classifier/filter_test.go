package classifier

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/bench/dolly"
)

// TestFilterNoiseParity checks FilterNoise and FilterNoiseV1 against the cases the
// notebook's twin (train/textfilter.py, its test_textfilter.py) answers from the same file:
// unicode, punctuation runs, brackets, trailers, texts that filter to nothing. A case's "v1"
// is FilterNoiseV1's answer where it differs from "out".
func TestFilterNoiseParity(t *testing.T) {
	f, err := os.Open(filepath.Join("testdata", "noise_filter.jsonl"))
	require.NoError(t, err)
	defer f.Close()
	n, trailers := 0, 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var c struct{ In, Out, V1 string }
		require.NoError(t, json.Unmarshal(sc.Bytes(), &c))
		require.Equal(t, c.Out, FilterNoise(c.In), "input %q", c.In)
		require.Equal(t, c.Out, FilterNoise(c.Out), "filtering is idempotent: %q", c.Out)
		if c.V1 == "" {
			c.V1 = c.Out
		} else {
			trailers++
		}
		require.Equal(t, c.V1, FilterNoiseV1(c.In), "v1, input %q", c.In)
		n++
	}
	require.NoError(t, sc.Err())
	require.GreaterOrEqual(t, n, 70)
	require.GreaterOrEqual(t, trailers, 8, "cases where the trailer rule drops words")
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
		{"a label left of a number after the question", "Where is the Eiffel Tower? order 123456789", "Where is the Eiffel Tower?"},
		{"a trailer after a tag", "Summarize this text. [build 3fa9b2c] ERROR at line 42", "Summarize this text."},
		{"more than 3 kept words are no trailer", "Summarize this text. ERROR at line 42 of the file", "Summarize this text. ERROR at line of the file"},
		{"more than 8 words are no trailer: a list is content", "Name the makers. 737, A220, 737 MAX, A350, A330, 747-8, 767, A320, 777", "Name the makers. MAX,"},
		{"a trailer without noise stays", "Why is the sky blue? Thanks", "Why is the sky blue? Thanks"},
		{"an abbreviation ends no sentence", "Who won the match vs. Spain in 2012", "Who won the match vs. Spain in"},
		{"closing quotes after the end", "Name a poem.\u201d ref 42", "Name a poem.\u201d"},
		{"empty", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, FilterNoise(tc.in))
		})
	}
}

func TestTextFilterByName(t *testing.T) {
	in := "Why is the sky blue? order 123456789"
	for name, want := range map[string]string{NoiseFilter: "Why is the sky blue?", NoiseFilterV1: "Why is the sky blue? order"} {
		f, err := TextFilter(name)
		require.NoError(t, err)
		require.Equal(t, want, f(in), name)
	}
	f, err := TextFilter("")
	require.NoError(t, err)
	require.Nil(t, f, "a model exported before the filter gets none")
	_, err = TextFilter("stopwords_v9")
	require.ErrorContains(t, err, "stopwords_v9")
}

func TestFilterNoiseCleanTextDoesNotAllocate(t *testing.T) {
	s := strings.Repeat("Write a short story about a dragon who learns to bake bread. ", 4)
	require.Zero(t, testing.AllocsPerRun(100, func() { _ = FilterNoise(s) }))
}

func TestFilterInputFiltersTheInstructionOnly(t *testing.T) {
	in := FormatInput("Summarize this (ref r7-true-c2-00ff) ", " In 1969, 3 astronauts flew. ")
	require.Equal(t, "Summarize this [SEP] In 1969, 3 astronauts flew.", FilterInput(in, FilterNoise))
	require.Equal(t, "Write a poem", FilterInput("Write a poem #4821", FilterNoise))
	require.Equal(t, "#4821", FilterInput("#4821", FilterNoise), "noise only: kept as it came")
	require.Equal(t, "Summarize [SEP] 12 34", FilterInput("Summarize [SEP] 12 34", FilterNoise))
	require.Equal(t, "Why? order [SEP] It is. id 7", FilterInput("Why? order 12 [SEP] It is. id 7", FilterNoiseV1))
	require.Equal(t, "Why? [SEP] It is. id 7", FilterInput("Why? order 12 [SEP] It is. id 7", FilterNoise))
	clean := "Write a poem [SEP] about 3 seas"
	require.Zero(t, testing.AllocsPerRun(100, func() { _ = FilterInput(clean, FilterNoise) }))
}

// BenchmarkFilterNoise measures the filter on prompts as they arrive: a clean Dolly-like
// instruction (nothing dropped), the same with a reference tag and a URL, a long prompt of
// about 190 words with numbers in it, and 16 KiB (server.max_text_bytes' default) of it,
// with numbers and without.
func BenchmarkFilterNoise(b *testing.B) {
	clean := "Write a short story about a dragon who learns to bake bread, in the style of a fairy tale for children."
	long := strings.Repeat("The Nile flows 6,650 km north through 11 countries into the Mediterranean Sea. ", 15)
	for _, bc := range []struct{ name, text string }{
		{"clean", clean},
		{"tag+url", clean + " (ref r1-false-c1-3fa9b2c1-8e2d-123) see https://docs.acme.io/a1b2c3/setup?id=42"},
		{"long", long},
		{"16KiB", strings.Repeat("The Nile flows 6,650 km north through 11 countries into the Mediterranean Sea. ", 220)[:16<<10]},
		{"16KiB-clean", strings.Repeat("The Nile flows far north through many countries into the Mediterranean Sea. ", 230)[:16<<10]},
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

// TestFilterNoiseMatchesReference holds the filter to the reference it was sped up from
// (filter_ref_test.go) on every Dolly row's instruction, context and response, each alone
// and, to take the pooled path for long texts, joined with the parity cases into texts of
// up to 16 KiB; then on the parity cases with noise put between every word.
func TestFilterNoiseMatchesReference(t *testing.T) {
	rows, err := dolly.Load(filepath.Join("..", dolly.DefaultPath))
	require.NoError(t, err)
	texts := dolly.Strings(rows)
	require.Greater(t, len(texts), 10_000)
	cases, err := os.ReadFile(filepath.Join("testdata", "noise_filter.jsonl"))
	require.NoError(t, err)
	for line := range strings.SplitSeq(strings.TrimSpace(string(cases)), "\n") {
		var c struct{ In string }
		require.NoError(t, json.Unmarshal([]byte(line), &c))
		texts = append(texts, c.In, strings.ReplaceAll(c.In, " ", " #42 (ref x-1) \t"))
	}
	var joined strings.Builder
	seps := []string{" ", "\n\n", " \t ", "\u3000", ". "}
	for i, s := range texts {
		joined.WriteString(s)
		joined.WriteString(seps[i%len(seps)])
		if joined.Len() > 256+i%(16<<10) {
			texts = append(texts, joined.String())
			joined.Reset()
		}
	}
	long := 0
	for _, s := range texts {
		if len(s) > 256 {
			long++
		}
		for _, trailer := range []bool{true, false} {
			if got, want := filterNoise(s, trailer), filterNoiseRef(s, trailer); got != want {
				t.Fatalf("trailer %v: %q\ngives %q\nthe reference %q", trailer, s, got, want)
			}
		}
	}
	require.Greater(t, long, 2_000, "texts over 256 bytes")
}

// FuzzFilterNoise: on any client text the filter returns the text itself or some of its
// words, in order, joined by one space, and filtering again changes nothing.
func FuzzFilterNoise(f *testing.F) {
	for _, s := range []string{"", "Write a poem #4821", "(ref r1-x-9) hi", "[a (b 1] c)", "\xff\xfe 1 x", "( ( ( 1", "a\u00a0b 1\u3000c",
		"Why? order 12", "Done.\u201d a b 1", "Stop! [x 1] y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		// The same words past 256 bytes take the pooled path: both must answer as the
		// reference does.
		long := s
		for len(long) <= 256 && len(s) > 0 {
			long += "\n" + s
		}
		for _, trailer := range []bool{true, false} {
			require.Equal(t, filterNoiseRef(s, trailer), filterNoise(s, trailer), "the reference filter, trailer %v", trailer)
			require.Equal(t, filterNoiseRef(long, trailer), filterNoise(long, trailer), "the reference filter, trailer %v, long", trailer)
		}
		for _, filter := range []func(string) string{FilterNoise, FilterNoiseV1} {
			got := filter(s)
			require.Equal(t, got, filter(got), "idempotent")
			if got == s {
				continue
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
		}
	})
}
