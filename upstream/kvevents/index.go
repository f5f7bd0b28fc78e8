package kvevents

import (
	"sync"
	"time"
)

// index is one replica's KV-cache blocks as its engine reports them: a map
// from the engine's block hash to the gateway's key for the same block
// (see AppendKeys), and the set of keys held. It is bounded: at capacity the
// oldest stored block is forgotten to make room (an engine that sends its
// BlockRemoved events never gets there, since its cache is smaller than the
// bound; one whose removals were lost does, and its oldest entries are the
// likeliest to be stale).
//
// pending holds the keys of recent picks not yet confirmed by a
// BlockStored, each until its expiry, so that a burst of requests sharing a
// new prefix lands on the replica chosen first instead of spreading while
// that replica is still prefilling. It is bounded too: beyond maxPending
// keys a pick's keys are not recorded.
//
// Safe for concurrent use: the connection goroutines write under mu, the
// policies read under its read lock.
type index struct {
	capacity   int
	maxPending int

	mu         sync.RWMutex
	byEngine   map[uint64]int32 // engine block hash → slot
	slots      []slot
	free       []int32
	head, tail int32            // most and least recently stored; -1 when empty
	held       map[uint64]int32 // key → number of engine blocks with that key
	pending    map[uint64]int64 // key → expiry, unix nanoseconds
	blockSize  int              // of the latest BlockStored; 0 before any
}

type slot struct {
	engine, key uint64
	prev, next  int32
}

func newIndex(capacity, maxPending int) *index {
	x := &index{capacity: capacity, maxPending: maxPending}
	x.reset()
	return x
}

// reset forgets every block (new maps, so a large index's memory is freed).
// Caller holds mu, or is the constructor.
func (x *index) reset() {
	x.byEngine = make(map[uint64]int32)
	x.held = make(map[uint64]int32)
	x.slots, x.free = nil, nil
	x.head, x.tail = -1, -1
}

// len is the number of blocks held. Caller holds mu.
func (x *index) len() int { return len(x.byEngine) }

// storeResult counts what one BlockStored did.
type storeResult struct {
	stored, orphaned, evicted int
}

// store applies a BlockStored: each block's key chains from its parent's
// (the event's parent_block_hash for the first, the previous block for the
// others). A first block whose parent the index does not know (it was
// stored before the gateway listened, or was forgotten) cannot be keyed:
// the event's blocks are dropped as orphans. Caller holds mu.
func (x *index) store(ev *event) storeResult {
	if x.blockSize != ev.blockSize {
		if x.len() > 0 { // the engine came back with another block size
			x.reset()
		}
		x.blockSize = ev.blockSize
	}
	parent := rootKey(ev.lora)
	if ev.hasParent {
		i, ok := x.byEngine[ev.parent]
		if !ok {
			return storeResult{orphaned: len(ev.hashes)}
		}
		parent = x.slots[i].key
	}
	var res storeResult
	for i, h := range ev.hashes {
		k := chain(parent, ev.tokens[i*ev.blockSize:(i+1)*ev.blockSize])
		if x.insert(h, k) {
			res.evicted++
		}
		parent = k
		res.stored++
	}
	return res
}

// insert maps engine hash h to key k as the most recently stored block and
// reports whether the oldest block was evicted to make room.
func (x *index) insert(h, k uint64) (evicted bool) {
	if i, ok := x.byEngine[h]; ok {
		if old := x.slots[i].key; old != k {
			x.release(old)
			x.held[k]++
			x.slots[i].key = k
		}
		x.unlink(i)
		x.pushFront(i)
		return false
	}
	if len(x.byEngine) >= x.capacity {
		x.remove(x.slots[x.tail].engine)
		evicted = true
	}
	var i int32
	if n := len(x.free); n > 0 {
		i = x.free[n-1]
		x.free = x.free[:n-1]
	} else {
		x.slots = append(x.slots, slot{})
		i = int32(len(x.slots) - 1)
	}
	x.slots[i] = slot{engine: h, key: k, prev: -1, next: -1}
	x.byEngine[h] = i
	x.held[k]++
	x.pushFront(i)
	return evicted
}

// remove forgets engine hash h and reports whether it was known.
func (x *index) remove(h uint64) bool {
	i, ok := x.byEngine[h]
	if !ok {
		return false
	}
	x.unlink(i)
	x.release(x.slots[i].key)
	delete(x.byEngine, h)
	x.free = append(x.free, i)
	return true
}

func (x *index) release(k uint64) {
	if n := x.held[k] - 1; n > 0 {
		x.held[k] = n
	} else {
		delete(x.held, k)
	}
}

func (x *index) unlink(i int32) {
	s := &x.slots[i]
	if s.prev >= 0 {
		x.slots[s.prev].next = s.next
	} else {
		x.head = s.next
	}
	if s.next >= 0 {
		x.slots[s.next].prev = s.prev
	} else {
		x.tail = s.prev
	}
	s.prev, s.next = -1, -1
}

func (x *index) pushFront(i int32) {
	s := &x.slots[i]
	s.prev, s.next = -1, x.head
	if x.head >= 0 {
		x.slots[x.head].prev = i
	}
	x.head = i
	if x.tail < 0 {
		x.tail = i
	}
}

// leading returns how many of keys, from the first, the replica holds in a
// row: stored, or picked within the pending window before now.
func (x *index) leading(keys []uint64, now time.Time) int {
	t := now.UnixNano()
	x.mu.RLock()
	defer x.mu.RUnlock()
	for i, k := range keys {
		if x.held[k] > 0 {
			continue
		}
		if exp, ok := x.pending[k]; ok && exp > t {
			continue
		}
		return i
	}
	return len(keys)
}

// stored returns how many of keys, from the first, the replica's engine
// reported stored and has not removed: leading without the pending window.
func (x *index) stored(keys []uint64) int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	for i, k := range keys {
		if x.held[k] == 0 {
			return i
		}
	}
	return len(keys)
}

// expect records keys as held from now for ttl (the pending window). It
// reports false when the pending set was full and the keys were dropped.
func (x *index) expect(keys []uint64, now time.Time, ttl time.Duration) bool {
	e := now.Add(ttl).UnixNano()
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.pending == nil {
		x.pending = make(map[uint64]int64)
	}
	if len(x.pending)+len(keys) > x.maxPending {
		t := now.UnixNano()
		for k, exp := range x.pending {
			if exp <= t {
				delete(x.pending, k)
			}
		}
		if len(x.pending)+len(keys) > x.maxPending {
			return false
		}
	}
	for _, k := range keys {
		if x.held[k] == 0 {
			x.pending[k] = e
		}
	}
	return true
}
