package kvevents

import (
	"encoding/binary"

	"github.com/cespare/xxhash/v2"
)

// Block keys are the gateway's own names for KV-cache blocks, computed from
// token ids alone, so the engine's block-hash algorithm and seed never need
// to match: key(block i) = xxhash64(seed = key(block i−1), the block's token
// ids as little-endian uint32), and block 0 is seeded by the adapter (see
// rootKey). Equal keys mean equal tokens from the start of the prompt up to
// the end of that block, under the same adapter.

// rootSeed starts every chain; any constant works, it only has to be fixed.
const rootSeed uint64 = 0x6b76_6576_656e_7473 // "kvevents"

// LoRAKey names a LoRA adapter in block keys: the xxhash of its name, as
// vLLM's lora_name. 0 (the empty name) is the base model.
func LoRAKey(name string) uint64 {
	if name == "" {
		return 0
	}
	if k := xxhash.Sum64String(name); k != 0 {
		return k
	}
	return 1
}

// rootKey is the parent of a chain's first block: the adapter mixed into
// the seed, so blocks of the same tokens under different adapters differ.
func rootKey(lora uint64) uint64 {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], lora)
	var d xxhash.Digest
	d.ResetWithSeed(rootSeed)
	_, _ = d.Write(b[:])
	return d.Sum64()
}

// chain returns the key of a block of tokens whose predecessor has key parent.
func chain(parent uint64, tokens []uint32) uint64 {
	var d xxhash.Digest
	d.ResetWithSeed(parent)
	var buf [64]byte
	for len(tokens) > 0 {
		n := min(len(tokens), len(buf)/4)
		for i, t := range tokens[:n] {
			binary.LittleEndian.PutUint32(buf[4*i:], t)
		}
		_, _ = d.Write(buf[:4*n])
		tokens = tokens[n:]
	}
	return d.Sum64()
}

// AppendKeys appends to dst the keys of the full blocks of tokens (a
// trailing partial block has none: engines cache only full blocks), cut
// every blockSize tokens, under adapter lora (0: the base model).
func AppendKeys(dst []uint64, tokens []uint32, blockSize int, lora uint64) []uint64 {
	if blockSize < 1 {
		return dst
	}
	k := rootKey(lora)
	for len(tokens) >= blockSize {
		k = chain(k, tokens[:blockSize])
		dst = append(dst, k)
		tokens = tokens[blockSize:]
	}
	return dst
}
