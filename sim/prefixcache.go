package sim

import (
	"container/list"
	"encoding/binary"
	"hash/fnv"
	"sync"
)

// BlockHashes splits prompt into blocks of blockChars bytes and hashes each
// block chained to its predecessor (FNV-1a 64 over the previous hash and the
// block), so equal hashes mean equal prefixes, not just equal blocks. A
// trailing partial block is not hashed: like vLLM, only full blocks are
// cached.
func BlockHashes(prompt string, blockChars int) []uint64 {
	if blockChars < 1 {
		return nil
	}
	n := len(prompt) / blockChars
	if n == 0 {
		return nil
	}
	out := make([]uint64, n)
	h := fnv.New64a()
	var prev [8]byte
	for i := range n {
		h.Reset()
		if i > 0 {
			binary.LittleEndian.PutUint64(prev[:], out[i-1])
			h.Write(prev[:])
		}
		h.Write([]byte(prompt[i*blockChars : (i+1)*blockChars]))
		out[i] = h.Sum64()
	}
	return out
}

// prefixCache is the simulated KV cache's prefix index: an LRU of block
// hashes with a fixed capacity. It is lossy by design: inserting beyond
// capacity evicts the least recently used blocks, which may break a cached
// prefix in the middle (match then stops at the hole). Safe for concurrent
// use.
type prefixCache struct {
	capacity int

	mu    sync.Mutex
	lru   *list.List // of uint64; front is most recently used
	index map[uint64]*list.Element
}

func newPrefixCache(capacity int) *prefixCache {
	return &prefixCache{capacity: capacity, lru: list.New(), index: make(map[uint64]*list.Element)}
}

// match returns how many leading blocks of hashes are cached, and marks
// them used.
func (c *prefixCache) match(hashes []uint64) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, h := range hashes {
		e, ok := c.index[h]
		if !ok {
			break
		}
		c.lru.MoveToFront(e)
		n++
	}
	return n
}

// insert adds every block of hashes, evicting the least recently used
// blocks beyond capacity. When changed is not nil it is told, under the
// cache's lock so that calls arrive in the cache's own order, which blocks
// were new (the indices into hashes, ascending) and which were evicted: what
// a vLLM engine reports as BlockStored and BlockRemoved events.
func (c *prefixCache) insert(hashes []uint64, changed func(stored []int, removed []uint64)) {
	if c.capacity == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var stored []int
	var removed []uint64
	for i, h := range hashes {
		if e, ok := c.index[h]; ok {
			c.lru.MoveToFront(e)
			continue
		}
		c.index[h] = c.lru.PushFront(h)
		stored = append(stored, i)
		if c.lru.Len() > c.capacity {
			old := c.lru.Back()
			c.lru.Remove(old)
			delete(c.index, old.Value.(uint64))
			removed = append(removed, old.Value.(uint64))
		}
	}
	if changed != nil && (len(stored) > 0 || len(removed) > 0) {
		changed(stored, removed)
	}
}

// clear drops every block; changed, when not nil, is told under the lock.
func (c *prefixCache) clear(changed func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lru.Init()
	clear(c.index)
	if changed != nil {
		changed()
	}
}

// len returns the number of cached blocks.
func (c *prefixCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}
