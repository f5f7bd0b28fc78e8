package kvevents

import (
	"encoding/binary"
	"math"
)

// Event is one KV-cache event for a publisher to send: the simulator's, and
// tests'. The gateway itself only decodes.
type Event struct {
	// Type is "BlockStored", "BlockRemoved" or "AllBlocksCleared".
	Type string
	// BlockHashes are the engine's hashes of the blocks stored or removed.
	BlockHashes []uint64
	// ParentBlockHash is the hash of the block before the first one stored;
	// nil when the first block starts the sequence.
	ParentBlockHash *uint64
	// TokenIDs are the stored blocks' tokens, BlockSize per block.
	TokenIDs  []uint32
	BlockSize int
	// LoRAName names the adapter; "" is the base model.
	LoRAName string
}

// Event types as vLLM names them.
const (
	BlockStored      = "BlockStored"
	BlockRemoved     = "BlockRemoved"
	AllBlocksCleared = "AllBlocksCleared"
)

// AppendBatch appends the msgpack payload of one event batch as vLLM 0.32
// sends it: the array [ts, events, data_parallel_rank] with each event a map
// keyed by field name, "type" first, medium "GPU".
func AppendBatch(dst []byte, ts float64, rank int, events []Event) []byte {
	dst = append(dst, 0x93)
	dst = appendFloat(dst, ts)
	dst = appendArray(dst, len(events))
	for _, e := range events {
		switch e.Type {
		case BlockStored:
			dst = appendMap(dst, 7)
			dst = appendStr(appendStr(dst, "type"), e.Type)
			dst = appendHashes(appendStr(dst, "block_hashes"), e.BlockHashes)
			dst = appendStr(dst, "parent_block_hash")
			if e.ParentBlockHash == nil {
				dst = append(dst, 0xc0)
			} else {
				dst = appendUint(dst, *e.ParentBlockHash)
			}
			dst = appendArray(appendStr(dst, "token_ids"), len(e.TokenIDs))
			for _, t := range e.TokenIDs {
				dst = appendUint(dst, uint64(t))
			}
			dst = appendUint(appendStr(dst, "block_size"), uint64(e.BlockSize))
			dst = appendStr(dst, "lora_name")
			if e.LoRAName == "" {
				dst = append(dst, 0xc0)
			} else {
				dst = appendStr(dst, e.LoRAName)
			}
			dst = appendStr(appendStr(dst, "medium"), "GPU")
		case BlockRemoved:
			dst = appendMap(dst, 3)
			dst = appendStr(appendStr(dst, "type"), e.Type)
			dst = appendHashes(appendStr(dst, "block_hashes"), e.BlockHashes)
			dst = appendStr(appendStr(dst, "medium"), "GPU")
		default:
			dst = appendMap(dst, 1)
			dst = appendStr(appendStr(dst, "type"), e.Type)
		}
	}
	return appendUint(dst, uint64(rank))
}

func appendHashes(dst []byte, hs []uint64) []byte {
	dst = appendArray(dst, len(hs))
	for _, h := range hs {
		dst = appendUint(dst, h)
	}
	return dst
}

func appendFloat(dst []byte, f float64) []byte {
	return binary.BigEndian.AppendUint64(append(dst, 0xcb), math.Float64bits(f))
}

func appendUint(dst []byte, v uint64) []byte {
	switch {
	case v <= 0x7f:
		return append(dst, byte(v))
	case v <= math.MaxUint8:
		return append(dst, 0xcc, byte(v))
	case v <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(dst, 0xcd), uint16(v))
	case v <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(dst, 0xce), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(dst, 0xcf), v)
}

func appendStr(dst []byte, s string) []byte {
	switch n := len(s); {
	case n <= 31:
		dst = append(dst, 0xa0|byte(n))
	case n <= math.MaxUint8:
		dst = append(dst, 0xd9, byte(n))
	case n <= math.MaxUint16:
		dst = binary.BigEndian.AppendUint16(append(dst, 0xda), uint16(n))
	default:
		dst = binary.BigEndian.AppendUint32(append(dst, 0xdb), uint32(n))
	}
	return append(dst, s...)
}

func appendArray(dst []byte, n int) []byte {
	switch {
	case n <= 15:
		return append(dst, 0x90|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(dst, 0xdc), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(dst, 0xdd), uint32(n))
}

func appendMap(dst []byte, n int) []byte {
	switch {
	case n <= 15:
		return append(dst, 0x80|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(dst, 0xde), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(dst, 0xdf), uint32(n))
}
