package kvevents

import (
	"bytes"
	"fmt"

	"github.com/cespare/xxhash/v2"
)

// kind is a KV-cache event's type.
type kind uint8

const (
	kindUnknown kind = iota
	kindStored       // BlockStored
	kindRemoved      // BlockRemoved
	kindCleared      // AllBlocksCleared
)

// event is one decoded KV-cache event. The decoder reuses one event and its
// slices for every event of a batch: the callback must not keep them.
type event struct {
	kind kind
	// hashes are the engine's block hashes, as opaque 64-bit keys: an
	// integer hash as its bits, a bytes hash (some vLLM versions) as the
	// xxhash of its bytes.
	hashes    []uint64
	parent    uint64
	hasParent bool
	tokens    []uint32
	blockSize int
	// lora is the adapter the blocks were computed with (LoRAKey of its
	// name, or its numeric id when only that is sent); 0 is the base model.
	lora uint64
	// offGPU marks events about another medium than the GPU cache (CPU
	// offloading tiers), which the index does not track.
	offGPU bool
	// group is the KV-cache group (hybrid models); the index tracks group 0.
	group int64
	// tooManyTokens marks a BlockStored whose token_ids exceeded the
	// decoder's cap; its tokens were skipped, not read.
	tooManyTokens bool
}

// batch is a decoded payload's header: the events themselves are visited
// one at a time by decoder.events.
type batch struct {
	ts      float64
	rank    int64 // data-parallel rank; 0 when absent
	events  int   // offset of the events array in the payload
	payload []byte
}

// decoder turns payloads into events. Not safe for concurrent use: one per
// connection.
type decoder struct {
	maxTokens int
	ev        event
}

// header reads a payload's batch header: vLLM's EventBatch, either as an
// array [ts, events, data_parallel_rank] (msgspec array_like) or as a map
// {"ts", "events", "data_parallel_rank"}. Trailing elements and unknown keys
// are ignored.
func (d *decoder) header(payload []byte) (batch, error) {
	b := batch{events: -1, payload: payload}
	r := reader{b: payload}
	if n, ok := r.arrayLen(); ok {
		for i := range n {
			switch i {
			case 0:
				b.ts, _ = r.floatValue()
			case 1:
				b.events = r.i
				r.skip()
			case 2:
				b.rank = d.rank(&r)
			default:
				r.skip()
			}
		}
	} else if n, ok := r.mapLen(); ok {
		for range n {
			key, _ := r.bytesValue()
			switch string(key) {
			case "ts":
				b.ts, _ = r.floatValue()
			case "events":
				b.events = r.i
				r.skip()
			case "data_parallel_rank":
				b.rank = d.rank(&r)
			default:
				r.skip()
			}
		}
	} else {
		return b, fmt.Errorf("%w: batch is neither an array nor a map", errMsgpack)
	}
	if r.err != nil {
		return b, fmt.Errorf("%w: batch at byte %d", r.err, r.i)
	}
	if b.events < 0 {
		return b, fmt.Errorf("%w: batch without events", errMsgpack)
	}
	return b, nil
}

func (d *decoder) rank(r *reader) int64 {
	if r.nilValue() {
		return 0
	}
	bits, _, ok := r.intValue()
	if !ok {
		r.skip()
		return 0
	}
	return int64(bits)
}

// events calls fn for each well-formed event of b, in order, and returns
// how many events were malformed (skipped). The event passed to fn is only
// valid during the call.
func (d *decoder) events(b batch, fn func(*event)) (malformed int) {
	r := reader{b: b.payload, i: b.events}
	n, ok := r.arrayLen()
	if !ok {
		return 1
	}
	for range n {
		start := r.i
		r.skip() // the outer cursor moves past the event whatever it holds
		if r.err != nil {
			return malformed + 1
		}
		if d.event(b.payload[start:r.i]) {
			fn(&d.ev)
		} else {
			malformed++
		}
	}
	return malformed
}

// event decodes one event, either tagged array (older vLLM: ["BlockStored",
// block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium,
// lora_name, ...]) or map with a "type" key. It reports false for an event
// that is not well formed; an unknown type is well formed (kindUnknown).
func (d *decoder) event(b []byte) bool {
	ev := &d.ev
	*ev = event{hashes: ev.hashes[:0], tokens: ev.tokens[:0]}
	r := reader{b: b}
	if n, ok := r.arrayLen(); ok {
		if n == 0 {
			return false
		}
		tag, ok := r.bytesValue()
		if !ok {
			return false
		}
		ev.kind = kindOf(tag)
		for i := 1; i < n && r.ok(); i++ {
			if !d.field(&r, arrayField(ev.kind, i)) {
				return false
			}
		}
	} else if n, ok := r.mapLen(); ok {
		for range n {
			key, ok := r.bytesValue()
			if !ok {
				return false
			}
			if string(key) == "type" {
				tag, ok := r.bytesValue()
				if !ok {
					return false
				}
				ev.kind = kindOf(tag)
				continue
			}
			if !d.field(&r, string(key)) {
				return false
			}
		}
	} else {
		return false
	}
	if r.err != nil {
		return false
	}
	return d.valid()
}

// arrayField names the field at position i of a tagged-array event.
func arrayField(k kind, i int) string {
	switch k {
	case kindStored:
		fields := [...]string{"", "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name", "extra_keys", "group_idx"}
		if i < len(fields) {
			return fields[i]
		}
	case kindRemoved:
		fields := [...]string{"", "block_hashes", "medium", "group_idx"}
		if i < len(fields) {
			return fields[i]
		}
	}
	return ""
}

func kindOf(tag []byte) kind {
	switch string(tag) {
	case "BlockStored":
		return kindStored
	case "BlockRemoved":
		return kindRemoved
	case "AllBlocksCleared":
		return kindCleared
	}
	return kindUnknown
}

// field reads the value of one named field into d.ev; unknown names are
// skipped. It reports false for a value of the wrong type.
func (d *decoder) field(r *reader, name string) bool {
	ev := &d.ev
	switch name {
	case "block_hashes":
		n, ok := r.arrayLen()
		if !ok {
			return false
		}
		for range n {
			h, ok := hashValue(r)
			if !ok {
				return false
			}
			ev.hashes = append(ev.hashes, h)
		}
	case "parent_block_hash":
		if r.nilValue() {
			return true
		}
		ev.parent, ev.hasParent = hashValue(r)
		return ev.hasParent
	case "token_ids":
		n, ok := r.arrayLen()
		if !ok {
			return false
		}
		if n > d.maxTokens {
			ev.tooManyTokens = true
			for range n {
				r.skip()
			}
			return r.ok()
		}
		for range n {
			bits, neg, ok := r.intValue()
			if !ok || neg || bits > 1<<32-1 {
				return false
			}
			ev.tokens = append(ev.tokens, uint32(bits))
		}
	case "block_size":
		bits, neg, ok := r.intValue()
		if !ok || neg || bits < 1 || bits > 1<<20 {
			return false
		}
		ev.blockSize = int(bits)
	case "lora_id":
		if r.nilValue() {
			return true
		}
		bits, _, ok := r.intValue()
		if !ok {
			return false
		}
		if ev.lora == 0 { // a name, when sent, wins
			ev.lora = bits
		}
	case "lora_name":
		if r.nilValue() {
			return true
		}
		name, ok := r.bytesValue()
		if !ok {
			return false
		}
		ev.lora = LoRAKey(string(name))
	case "medium":
		if r.nilValue() {
			return true
		}
		m, ok := r.bytesValue()
		if !ok {
			return false
		}
		ev.offGPU = !bytes.EqualFold(m, []byte("GPU"))
	case "group_idx":
		if r.nilValue() {
			return true
		}
		bits, _, ok := r.intValue()
		if !ok {
			return false
		}
		ev.group = int64(bits)
	default:
		r.skip()
	}
	return r.ok()
}

// valid checks what the index relies on.
func (d *decoder) valid() bool {
	ev := &d.ev
	switch ev.kind {
	case kindStored:
		if len(ev.hashes) == 0 || ev.blockSize < 1 {
			return false
		}
		return ev.tooManyTokens || len(ev.tokens) == len(ev.hashes)*ev.blockSize
	case kindRemoved:
		return len(ev.hashes) > 0
	}
	return true
}

// hashValue reads an engine block hash: an integer (any width or sign) as
// its bits, or bytes as their xxhash.
func hashValue(r *reader) (uint64, bool) {
	if bits, _, ok := r.intValue(); ok {
		return bits, true
	}
	if b, ok := r.bytesValue(); ok {
		return xxhash.Sum64(b), true
	}
	return 0, false
}
