package router

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/bench/dolly"
)

// TestNormalizeMatchesReference holds normalize and isNormal to the versions they were sped
// up from (input_ref_test.go) on every Dolly instruction, context and response as it is, with
// its spaces turned into other whitespace, and joined into texts of up to 64 KiB (what
// InputWithin reads for a 16 KiB limit); and on texts with invalid UTF-8 and Unicode spaces.
func TestNormalizeMatchesReference(t *testing.T) {
	rows, err := dolly.Load(filepath.Join("..", dolly.DefaultPath))
	require.NoError(t, err)
	texts := dolly.Strings(rows)
	require.Greater(t, len(texts), 10_000)
	odd := []string{" ", "  ", "\n", "\r\n", "\t", " \u00a0", "\u3000", "\u2003 ", "\x85", " \xff ", "\xc3", "\xe2\x80"}
	n := len(texts)
	var joined strings.Builder
	for i, s := range texts[:n] {
		texts = append(texts, strings.ReplaceAll(s, " ", odd[i%len(odd)]), odd[i%len(odd)]+s+odd[(i+1)%len(odd)])
		joined.WriteString(s)
		joined.WriteString(odd[i%len(odd)])
		if joined.Len() > 256+i%(64<<10) {
			texts = append(texts, joined.String())
			joined.Reset()
		}
	}
	for _, s := range texts {
		if got, want := normalize(s), normalizeRef(s); got != want {
			t.Fatalf("normalize(%q)\n= %q\nthe reference %q", s, got, want)
		}
		require.Equal(t, isNormalRef(s), isNormal(s), "isNormal(%q)", s)
	}
}

// FuzzNormalize compares normalize and isNormal with the reference on any text.
func FuzzNormalize(f *testing.F) {
	for _, s := range []string{"", " a  b ", "a\n\tb", "\u00a0x\u3000", "\xff x", "abc def ghi", "x \x85 y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := normalize(s), normalizeRef(s); got != want {
			t.Fatalf("normalize(%q) = %q, the reference %q", s, got, want)
		}
		if got, want := isNormal(s), isNormalRef(s); got != want {
			t.Fatalf("isNormal(%q) = %v, the reference %v", s, got, want)
		}
	})
}

// BenchmarkInput is Input on 16 KiB (server.max_text_bytes' default) of prose: already
// normal (one space between words: only checked), and with a line break after each sentence
// (rewritten).
//
//	go test -run '^$' -bench Input ./router/
func BenchmarkInput(b *testing.B) {
	normal := strings.TrimSpace(strings.Repeat("The Nile flows 6,650 km north through 11 countries into the Mediterranean Sea. ", 220)[:16<<10])
	lines := strings.ReplaceAll(normal, ". ", ".\n")
	for _, bc := range []struct{ name, text string }{{"16KiB-normal", normal}, {"16KiB-lines", lines}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(bc.text)))
			b.ReportAllocs()
			for b.Loop() {
				_ = Input(bc.text, "")
			}
		})
	}
}
