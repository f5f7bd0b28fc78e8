package kvevents

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// stored builds a BlockStored event the decoder would produce.
func stored(hashes []uint64, parent *uint64, tokens []uint32, blockSize int, lora uint64) *event {
	ev := &event{kind: kindStored, hashes: hashes, tokens: tokens, blockSize: blockSize, lora: lora}
	if parent != nil {
		ev.parent, ev.hasParent = *parent, true
	}
	return ev
}

func TestIndexKeysMatchRequestKeys(t *testing.T) {
	x := newIndex(100, 100)
	prompt := seqTokens(0, 10) // two full blocks of 4 and a partial one
	// The engine stores block 0, then block 1 chained to it, under hashes
	// of its own.
	x.store(stored([]uint64{501}, nil, prompt[:4], 4, 0))
	x.store(stored([]uint64{502}, ptr(uint64(501)), prompt[4:8], 4, 0))

	keys := AppendKeys(nil, prompt, 4, 0)
	require.Len(t, keys, 2, "the partial block has no key")
	now := time.Unix(0, 0)
	require.Equal(t, 2, x.leading(keys, now))

	other := AppendKeys(nil, append(seqTokens(0, 4), 9, 9, 9, 9), 4, 0)
	require.Equal(t, 1, x.leading(other, now), "same first block, different second")

	lora := AppendKeys(nil, prompt, 4, LoRAKey("sql-adapter"))
	require.Equal(t, 0, x.leading(lora, now), "an adapter's blocks are not the base model's")

	require.True(t, x.remove(501))
	require.Equal(t, 0, x.leading(keys, now), "a removed first block breaks the run")
	require.Equal(t, 1, x.len())
}

func TestIndexOrphanAndCapacity(t *testing.T) {
	x := newIndex(3, 100)
	res := x.store(stored([]uint64{7}, ptr(uint64(6)), seqTokens(0, 2), 2, 0))
	require.Equal(t, storeResult{orphaned: 1}, res)
	require.Zero(t, x.len())

	res = x.store(stored([]uint64{1, 2, 3, 4}, nil, seqTokens(0, 8), 2, 0))
	require.Equal(t, storeResult{stored: 4, evicted: 1}, res)
	require.Equal(t, 3, x.len())
	_, ok := x.byEngine[1]
	require.False(t, ok, "the oldest block goes first")

	// Storing an existing hash again refreshes it instead of duplicating.
	x.store(stored([]uint64{2}, nil, seqTokens(0, 2), 2, 0))
	require.Equal(t, 3, x.len())
	x.store(stored([]uint64{5}, ptr(uint64(4)), seqTokens(8, 2), 2, 0))
	_, ok = x.byEngine[2]
	require.True(t, ok, "the refreshed block outlives older ones")
	held := 0
	for _, n := range x.held {
		held += int(n)
	}
	require.Equal(t, x.len(), held)
}

func TestIndexBlockSizeChangeClears(t *testing.T) {
	x := newIndex(10, 10)
	x.store(stored([]uint64{1}, nil, seqTokens(0, 4), 4, 0))
	x.store(stored([]uint64{2}, nil, seqTokens(0, 8), 8, 0))
	require.Equal(t, 1, x.len())
	require.Equal(t, 8, x.blockSize)
}

func TestIndexPending(t *testing.T) {
	x := newIndex(10, 4)
	keys := AppendKeys(nil, seqTokens(0, 12), 4, 0)
	now := time.Unix(100, 0)
	require.True(t, x.expect(keys, now, 2*time.Second))
	require.Equal(t, 3, x.leading(keys, now.Add(time.Second)))
	require.Equal(t, 0, x.stored(keys), "pending is not stored")
	x.store(stored([]uint64{7}, nil, seqTokens(0, 4), 4, 0))
	require.Equal(t, 1, x.stored(keys), "the engine's word: the first block only")
	require.Equal(t, 3, x.leading(keys, now.Add(time.Second)))
	require.Equal(t, 1, x.leading(keys, now.Add(2*time.Second)), "pending blocks expire, stored ones stay")
	require.False(t, x.expect(AppendKeys(nil, seqTokens(50, 8), 4, 0), now.Add(time.Second), time.Second), "bounded")
	require.True(t, x.expect(AppendKeys(nil, seqTokens(50, 8), 4, 0), now.Add(3*time.Second), time.Second), "expired keys make room")
}

func BenchmarkAppendKeys(b *testing.B) {
	tokens := seqTokens(0, 4096)
	keys := make([]uint64, 0, 256)
	b.SetBytes(int64(4 * len(tokens)))
	for b.Loop() {
		keys = AppendKeys(keys[:0], tokens, 16, 0)
	}
	b.ReportMetric(float64(b.N)*float64(len(tokens))/b.Elapsed().Seconds(), "tokens/s")
}

// An adapter's blocks, reported under its name, match the request keys
// computed with LoRAKey of the same name, and only those.
func TestIndexLoRAByName(t *testing.T) {
	p := AppendBatch(nil, 0, 0, []Event{{Type: BlockStored, BlockHashes: []uint64{1}, TokenIDs: seqTokens(0, 4), BlockSize: 4, LoRAName: "sql"}})
	_, evs, bad := decodeAll(t, p, 16)
	require.Zero(t, bad)
	x := newIndex(10, 10)
	x.store(stored(evs[0].hashes, nil, evs[0].tokens, 4, evs[0].lora))
	now := time.Unix(0, 0)
	require.Equal(t, 1, x.leading(AppendKeys(nil, seqTokens(0, 4), 4, LoRAKey("sql")), now))
	require.Equal(t, 0, x.leading(AppendKeys(nil, seqTokens(0, 4), 4, 0), now))
	require.Equal(t, 0, x.leading(AppendKeys(nil, seqTokens(0, 4), 4, LoRAKey("chat")), now))
}
