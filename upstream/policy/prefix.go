package policy

import (
	"fmt"
	"sync"
	"unicode/utf8"

	"github.com/cespare/xxhash/v2"
)

// Prefix blocks: a prompt is cut into blocks of blockChars runes (AIBrix's
// "character tokenizer") and each block's hash is chained to the previous
// block's hash, so equal hash i means equal text up to the end of block i.
// A replica that was sent block hashes h1..hk is assumed to hold their KV
// cache; the router never asks the replica.

// blockSeed starts the chain; any constant works, it only has to be fixed.
const blockSeed uint64 = 0x9e3779b97f4a7c15

// maxIndexBlocks bounds every per-replica block index (about 40 bytes a
// block, so at most ~670 MB per replica even at this limit).
const maxIndexBlocks = 1 << 24

// validateBlocks checks the block size and per-replica index bound shared
// by the prefix-aware policies.
func validateBlocks(path string, blockChars, indexBlocks int) []error {
	var errs []error
	if blockChars < 1 {
		errs = append(errs, fmt.Errorf("%s.block_chars: must be >= 1, got %d", path, blockChars))
	}
	if indexBlocks < 1 || indexBlocks > maxIndexBlocks {
		errs = append(errs, fmt.Errorf("%s.index_blocks: must be in [1, %d], got %d", path, maxIndexBlocks, indexBlocks))
	}
	return errs
}

// appendBlockHashes appends the chained block hashes of prompt to dst and
// returns it with the prompt's length in runes. The last block may be
// shorter than blockChars; it is hashed too, so identical short prompts
// still match. Invalid UTF-8 bytes count as one rune each, as in range.
func appendBlockHashes(dst []uint64, prompt string, blockChars int) ([]uint64, int) {
	var d xxhash.Digest
	prev := blockSeed
	runes, inBlock, start := 0, 0, 0
	for i := 0; i < len(prompt); {
		// Fast path: a whole block of ASCII, checked 8 bytes at a time.
		if inBlock == 0 && len(prompt)-i >= blockChars && isASCII(prompt[i:i+blockChars]) {
			i += blockChars
			runes += blockChars
			inBlock = blockChars
		} else {
			if prompt[i] < utf8.RuneSelf {
				i++
			} else {
				_, size := utf8.DecodeRuneInString(prompt[i:])
				i += size
			}
			runes++
			inBlock++
		}
		if inBlock == blockChars {
			d.ResetWithSeed(prev)
			_, _ = d.WriteString(prompt[start:i])
			prev = d.Sum64()
			dst = append(dst, prev)
			start, inBlock = i, 0
		}
	}
	if inBlock > 0 {
		d.ResetWithSeed(prev)
		_, _ = d.WriteString(prompt[start:])
		dst = append(dst, d.Sum64())
	}
	return dst, runes
}

// isASCII reports whether s has no byte >= 0x80.
func isASCII(s string) bool {
	const high = 0x8080808080808080
	i := 0
	for ; i+8 <= len(s); i += 8 {
		if (uint64(s[i])|uint64(s[i+1])<<8|uint64(s[i+2])<<16|uint64(s[i+3])<<24|
			uint64(s[i+4])<<32|uint64(s[i+5])<<40|uint64(s[i+6])<<48|uint64(s[i+7])<<56)&high != 0 {
			return false
		}
	}
	for ; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// matchedChars converts a count of matched leading blocks into runes.
func matchedChars(matched, blockChars, totalRunes int) int {
	return min(matched*blockChars, totalRunes)
}

// hashBufs recycles hash slices so that Pick does not allocate per request.
var hashBufs = sync.Pool{New: func() any { b := make([]uint64, 0, 64); return &b }}

// blockHashesPooled hashes prompt into a pooled slice; the caller hands the
// returned pointer back with releaseHashes once it is done with the slice.
func blockHashesPooled(prompt string, blockChars int) (*[]uint64, int) {
	buf := hashBufs.Get().(*[]uint64)
	var runes int
	*buf, runes = appendBlockHashes((*buf)[:0], prompt, blockChars)
	return buf, runes
}

func releaseHashes(buf *[]uint64) {
	if cap(*buf) > 1<<16 { // do not keep a huge prompt's buffer alive
		return
	}
	hashBufs.Put(buf)
}

// prefixIndex is the router-side view of which blocks each replica caches:
// per replica ID, a bounded LRU set of block hashes. It is lossy by design:
// when a replica's set is full the least recently sent block is dropped,
// whether or not the replica still holds it.
//
// Not safe for concurrent use; the owning policy holds its mutex.
// Replicas that leave the pool keep their set until the policy is dropped.
type prefixIndex struct {
	capacity int
	replicas map[string]*lru[uint64, struct{}]
	// evicted is told how many blocks each record dropped (Env.Evicted).
	evicted func(table string, n int)
}

func newPrefixIndex(capacity int) *prefixIndex {
	return &prefixIndex{capacity: capacity, replicas: make(map[string]*lru[uint64, struct{}]),
		evicted: func(string, int) {}}
}

// leadingMatch returns how many leading hashes replica id holds in a row.
func (x *prefixIndex) leadingMatch(id string, hashes []uint64) int {
	set := x.replicas[id]
	if set == nil {
		return 0
	}
	for i, h := range hashes {
		if !set.contains(h) {
			return i
		}
	}
	return len(hashes)
}

// countPresent returns how many of hashes replica id holds, anywhere.
func (x *prefixIndex) countPresent(id string, hashes []uint64) int {
	set := x.replicas[id]
	if set == nil {
		return 0
	}
	n := 0
	for _, h := range hashes {
		if set.contains(h) {
			n++
		}
	}
	return n
}

// record marks hashes as sent to replica id. It walks them back to front so
// the leading blocks, shared by the most requests, are the most recently
// used and the last to be evicted.
func (x *prefixIndex) record(id string, hashes []uint64) {
	if len(hashes) == 0 {
		return
	}
	set := x.replicas[id]
	if set == nil {
		set = newLRU[uint64, struct{}](x.capacity)
		x.replicas[id] = set
	}
	dropped := 0
	for i := len(hashes) - 1; i >= 0; i-- {
		if set.put(hashes[i], struct{}{}) {
			dropped++
		}
	}
	if dropped > 0 {
		x.evicted(TablePrefixBlocks, dropped)
	}
}

// lru is a bounded map that evicts its least recently put entry. Entries
// live in one slice linked by index, so a full lru allocates nothing more.
// Not safe for concurrent use.
type lru[K comparable, V any] struct {
	capacity   int
	slot       map[K]int32
	ents       []lruEntry[K, V]
	head, tail int32 // most and least recently used; -1 when empty
}

type lruEntry[K comparable, V any] struct {
	key        K
	val        V
	prev, next int32
}

func newLRU[K comparable, V any](capacity int) *lru[K, V] {
	return &lru[K, V]{capacity: capacity, slot: make(map[K]int32), head: -1, tail: -1}
}

func (l *lru[K, V]) len() int { return len(l.slot) }

// contains reports whether k is present without refreshing it.
func (l *lru[K, V]) contains(k K) bool {
	_, ok := l.slot[k]
	return ok
}

// get returns k's value without refreshing it.
func (l *lru[K, V]) get(k K) (V, bool) {
	i, ok := l.slot[k]
	if !ok {
		var zero V
		return zero, false
	}
	return l.ents[i].val, true
}

// put inserts or updates k and makes it the most recently used entry,
// evicting the least recently used one when full; it reports whether it
// evicted one.
func (l *lru[K, V]) put(k K, v V) (evicted bool) {
	if i, ok := l.slot[k]; ok {
		l.ents[i].val = v
		l.moveToFront(i)
		return false
	}
	var i int32
	if len(l.ents) < l.capacity {
		l.ents = append(l.ents, lruEntry[K, V]{key: k, val: v, prev: -1, next: -1})
		i = int32(len(l.ents) - 1)
	} else {
		i = l.tail
		delete(l.slot, l.ents[i].key)
		l.unlink(i)
		l.ents[i].key, l.ents[i].val = k, v
		evicted = true
	}
	l.slot[k] = i
	l.pushFront(i)
	return evicted
}

func (l *lru[K, V]) moveToFront(i int32) {
	if l.head == i {
		return
	}
	l.unlink(i)
	l.pushFront(i)
}

func (l *lru[K, V]) unlink(i int32) {
	e := &l.ents[i]
	if e.prev >= 0 {
		l.ents[e.prev].next = e.next
	} else {
		l.head = e.next
	}
	if e.next >= 0 {
		l.ents[e.next].prev = e.prev
	} else {
		l.tail = e.prev
	}
	e.prev, e.next = -1, -1
}

func (l *lru[K, V]) pushFront(i int32) {
	e := &l.ents[i]
	e.prev, e.next = -1, l.head
	if l.head >= 0 {
		l.ents[l.head].prev = i
	}
	l.head = i
	if l.tail < 0 {
		l.tail = i
	}
}
