package policy

import (
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/stretchr/testify/require"
)

func hashes(prompt string, blockChars int) ([]uint64, int) {
	return appendBlockHashes(nil, prompt, blockChars)
}

func TestAppendBlockHashes(t *testing.T) {
	tests := []struct {
		name       string
		prompt     string
		blockChars int
		blocks     int
		runes      int
	}{
		{"empty", "", 4, 0, 0},
		{"shorter than a block", "abc", 4, 1, 3},
		{"exact blocks", "abcdefgh", 4, 2, 8},
		{"partial tail", "abcdefghij", 4, 3, 10},
		{"runes not bytes", "héllo wörld", 4, 3, 11},
		{"cjk", "你好世界你好", 2, 3, 6},
		{"invalid utf8 counts bytes", "\xff\xfe\xfd", 2, 2, 3},
		{"default block size", strings.Repeat("x", 300), 128, 3, 300},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hs, runes := hashes(tt.prompt, tt.blockChars)
			require.Len(t, hs, tt.blocks)
			require.Equal(t, tt.runes, runes)
		})
	}
}

func TestBlockHashesChain(t *testing.T) {
	a, _ := hashes("aaaabbbbcccc", 4)
	b, _ := hashes("aaaabbbbdddd", 4)
	require.Equal(t, a[:2], b[:2], "shared leading blocks hash alike")
	require.NotEqual(t, a[2], b[2])

	c, _ := hashes("xxxxbbbbcccc", 4)
	require.NotEqual(t, a[1], c[1], "a block's hash depends on every block before it")
	require.NotEqual(t, a[2], c[2])

	d, _ := hashes("aaaabbbbcc", 4)
	require.Equal(t, a[:2], d[:2])
	require.NotEqual(t, a[2], d[2], "a partial tail differs from the full block")

	e, _ := hashes("bbbbaaaa", 4)
	require.NotEqual(t, a[0], e[1], "position matters: same block text, different predecessor")

	again, _ := hashes("aaaabbbbcccc", 4)
	require.Equal(t, a, again, "deterministic")
}

func TestBlockHashesPooledAllocs(t *testing.T) {
	prompt := strings.Repeat("the same system prompt ", 100)
	allocs := testing.AllocsPerRun(100, func() {
		buf, _ := blockHashesPooled(prompt, 128)
		releaseHashes(buf)
	})
	require.Zero(t, allocs)
}

func TestMatchedChars(t *testing.T) {
	require.Equal(t, 8, matchedChars(2, 4, 10))
	require.Equal(t, 10, matchedChars(3, 4, 10), "a matched partial tail counts its own length")
	require.Equal(t, 0, matchedChars(0, 4, 10))
}

func TestLRU(t *testing.T) {
	l := newLRU[string, int](3)
	l.put("a", 1)
	l.put("b", 2)
	l.put("c", 3)
	require.Equal(t, 3, l.len())

	l.put("a", 10) // refresh a: b is now the oldest
	l.put("d", 4)  // evicts b
	require.False(t, l.contains("b"))
	v, ok := l.get("a")
	require.True(t, ok)
	require.Equal(t, 10, v)

	require.True(t, l.contains("c")) // contains does not refresh c
	l.put("e", 5)                    // evicts c
	require.False(t, l.contains("c"))
	for _, k := range []string{"a", "d", "e"} {
		require.True(t, l.contains(k), k)
	}
	require.Equal(t, 3, l.len())
	require.Len(t, l.ents, 3, "slots are reused, not grown")
}

func TestLRUCapacityOne(t *testing.T) {
	l := newLRU[uint64, struct{}](1)
	for i := range uint64(5) {
		l.put(i, struct{}{})
		l.put(i, struct{}{})
		require.True(t, l.contains(i))
		require.Equal(t, 1, l.len())
	}
}

func TestLRUStaysBounded(t *testing.T) {
	l := newLRU[uint64, struct{}](100)
	for i := range uint64(10_000) {
		l.put(i, struct{}{})
	}
	require.Equal(t, 100, l.len())
	for i := uint64(9_900); i < 10_000; i++ {
		require.True(t, l.contains(i))
	}
	// The list is consistent: walking from head visits every entry once.
	n := 0
	for i := l.head; i >= 0; i = l.ents[i].next {
		n++
	}
	require.Equal(t, 100, n)
}

func TestPrefixIndex(t *testing.T) {
	x := newPrefixIndex(100)
	hs, _ := hashes("aaaabbbbcccc", 4)
	require.Zero(t, x.leadingMatch("r0", hs), "unknown replica")

	x.record("r0", hs[:2])
	require.Equal(t, 2, x.leadingMatch("r0", hs))
	require.Equal(t, 2, x.countPresent("r0", hs))
	require.Zero(t, x.leadingMatch("r1", hs))

	other, _ := hashes("zzzzbbbbcccc", 4)
	x.record("r1", hs[1:]) // a run that does not start at block 0
	require.Zero(t, x.leadingMatch("r1", hs))
	require.Equal(t, 2, x.countPresent("r1", hs))
	require.Zero(t, x.leadingMatch("r0", other))
}

func TestPrefixIndexKeepsLeadingBlocksLongest(t *testing.T) {
	x := newPrefixIndex(4)
	hs, _ := hashes("aaaabbbbccccdddd", 4)
	x.record("r0", hs)
	other, _ := hashes("zzzzyyyy", 4)
	x.record("r0", other) // evicts two blocks: the request's last two, not its first
	require.Equal(t, 2, x.leadingMatch("r0", hs))
}

func TestIsASCII(t *testing.T) {
	for _, tt := range []struct {
		s    string
		want bool
	}{
		{"", true},
		{"abc", true},
		{strings.Repeat("x", 17), true},
		{strings.Repeat("x", 9) + "é", false},
		{"é" + strings.Repeat("x", 16), false},
		{strings.Repeat("x", 15) + "\x80", false},
	} {
		require.Equal(t, tt.want, isASCII(tt.s), "%q", tt.s)
	}
}

// TestBlockHashesFastPathAgrees checks the ASCII fast path splits exactly
// like the rune-by-rune path, wherever the non-ASCII runes fall.
func TestBlockHashesFastPathAgrees(t *testing.T) {
	slow := func(prompt string, blockChars int) ([]uint64, int) {
		var out []uint64
		var block []rune
		prev, runes := blockSeed, 0
		flush := func() {
			var d xxhash.Digest
			d.ResetWithSeed(prev)
			_, _ = d.WriteString(string(block))
			prev = d.Sum64()
			out = append(out, prev)
			block = block[:0]
		}
		for _, r := range prompt {
			runes++
			block = append(block, r)
			if len(block) == blockChars {
				flush()
			}
		}
		if len(block) > 0 {
			flush()
		}
		return out, runes
	}
	prompts := []string{
		strings.Repeat("ascii only ", 40),
		strings.Repeat("mixé ", 50),
		strings.Repeat("x", 127) + "日本語" + strings.Repeat("y", 300),
		"日本語" + strings.Repeat("z", 256),
	}
	for _, p := range prompts {
		for _, bc := range []int{1, 3, 8, 128} {
			want, wantRunes := slow(p, bc)
			got, gotRunes := appendBlockHashes(nil, p, bc)
			require.Equal(t, want, got, "block %d prompt %.20q", bc, p)
			require.Equal(t, wantRunes, gotRunes)
		}
	}
}
