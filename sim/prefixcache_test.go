package sim

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestBlockHashesAreChained(t *testing.T) {
	a := strings.Repeat("x", 8) + strings.Repeat("y", 8) + "tail"
	b := strings.Repeat("z", 8) + strings.Repeat("y", 8)
	ha, hb := BlockHashes(a, 8), BlockHashes(b, 8)
	assert.Len(t, ha, 2, "the partial tail block is not hashed")
	assert.Len(t, hb, 2)
	assert.NotEqual(t, ha[1], hb[1], "same block after a different prefix hashes differently")
	assert.Equal(t, ha, BlockHashes(a[:16], 8))
	assert.Empty(t, BlockHashes("short", 8))
}

func TestPrefixCacheMatchesLeadingRunAndEvictsLRU(t *testing.T) {
	c := newPrefixCache(4)
	p := BlockHashes("aaaabbbbccccdddd", 4) // 4 blocks
	assert.Equal(t, 0, c.match(p))
	c.insert(p, nil)
	assert.Equal(t, 4, c.match(p))
	assert.Equal(t, 2, c.match(BlockHashes("aaaabbbbXXXXdddd", 4)))

	// The partial match touched p[0] and p[1], so two new blocks evict the
	// least recently used p[2] and p[3].
	c.insert(BlockHashes("eeeeffff", 4), nil)
	assert.Equal(t, 4, c.len())
	assert.Equal(t, 2, c.match(p))
	assert.Equal(t, 2, c.match(BlockHashes("eeeeffff", 4)))
}

func TestPrefixCacheHoleEndsTheMatch(t *testing.T) {
	c := newPrefixCache(2)
	p := BlockHashes("aaaabbbb", 4)
	c.insert(p, nil)
	c.insert(BlockHashes("xxxx", 4), nil) // evicts p[0], keeps p[1]
	assert.Equal(t, 0, c.match(p), "p[1] is cached but its prefix is not")
}

func TestPrefixCacheDisabled(t *testing.T) {
	c := newPrefixCache(0)
	p := BlockHashes("aaaabbbb", 4)
	c.insert(p, nil)
	assert.Equal(t, 0, c.match(p))
	assert.Equal(t, 0, c.len())
}
