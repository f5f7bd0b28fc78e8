package fleet

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/triage-gw/triage/upstream/policy"
)

// The affinity messages, one Redis pub/sub message each, on the pool's channel
// ("<prefix>:affinity:<pool>"). Binary, because a pick is mostly 64-bit hashes: as JSON
// numbers they take 2.5 times the bytes and more than ten times the time to encode and decode
// (BenchmarkWire: 548 bytes and 1.9 µs for a typical pick of 63 hashes, against 1,369 bytes
// and 52 µs). Layout, integers as unsigned varints unless noted:
//
//	version (1 byte, wireVersion) · kind (1 byte) · sender gateway id (length, bytes)
//	kind picks: count, then per pick: replica id (length, bytes) · session hash (8 bytes LE,
//	            0 for none) · block chars · hash count · hashes (8 bytes LE each)
//	kind load:  count, then per replica with requests in flight: replica id (length, bytes)
//	            · in flight
//
// A message from a newer or older version, or one that does not parse, is ignored whole.
const wireVersion = 1

type msgKind byte

const (
	kindPicks msgKind = 1
	kindLoad  msgKind = 2
)

// Decoding bounds: a message never makes the receiver allocate more than these allow.
const (
	maxWireID      = 512 // bytes of a gateway or replica id
	maxWireEntries = 4096
)

var errMalformed = errors.New("malformed affinity message")

// message is one decoded affinity message.
type message struct {
	kind   msgKind
	sender string
	picks  []policy.Observation
	load   map[string]int
}

func appendHeader(b []byte, kind msgKind, sender string) []byte {
	b = append(b, wireVersion, byte(kind))
	return appendString(b, sender)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// encodePicks encodes a picks message.
func encodePicks(b []byte, sender string, picks []policy.Observation) []byte {
	b = appendHeader(b, kindPicks, sender)
	b = binary.AppendUvarint(b, uint64(len(picks)))
	for _, o := range picks {
		b = appendString(b, o.ReplicaID)
		b = binary.LittleEndian.AppendUint64(b, o.Session)
		b = binary.AppendUvarint(b, uint64(max(o.BlockChars, 0)))
		b = binary.AppendUvarint(b, uint64(len(o.Hashes)))
		for _, h := range o.Hashes {
			b = binary.LittleEndian.AppendUint64(b, h)
		}
	}
	return b
}

// encodeLoad encodes a load message: the replicas with requests in flight (absent means 0).
func encodeLoad(b []byte, sender string, inFlight map[string]int) []byte {
	b = appendHeader(b, kindLoad, sender)
	n := 0
	for _, v := range inFlight {
		if v > 0 {
			n++
		}
	}
	b = binary.AppendUvarint(b, uint64(n))
	for id, v := range inFlight {
		if v > 0 {
			b = appendString(b, id)
			b = binary.AppendUvarint(b, uint64(v))
		}
	}
	return b
}

// reader walks a message, remembering the first error.
type reader struct {
	b   []byte
	err error
}

func (r *reader) uvarint(limit uint64) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 || v > limit {
		r.err = errMalformed
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) string() string {
	n := r.uvarint(maxWireID)
	if r.err != nil || uint64(len(r.b)) < n {
		r.err = errMalformed
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

func (r *reader) uint64() uint64 {
	if r.err != nil || len(r.b) < 8 {
		r.err = errMalformed
		return 0
	}
	v := binary.LittleEndian.Uint64(r.b)
	r.b = r.b[8:]
	return v
}

// decode parses one message; its header alone when headerOnly (enough to skip this
// gateway's own messages without decoding them).
func decode(b []byte, headerOnly bool) (message, error) {
	var m message
	if len(b) < 2 {
		return m, errMalformed
	}
	if b[0] != wireVersion {
		return m, fmt.Errorf("affinity message version %d, want %d", b[0], wireVersion)
	}
	m.kind = msgKind(b[1])
	r := &reader{b: b[2:]}
	m.sender = r.string()
	if r.err != nil || headerOnly {
		return m, r.err
	}
	switch m.kind {
	case kindPicks:
		m.picks = decodePicks(r)
	case kindLoad:
		m.load = decodeLoad(r)
	default:
		return m, fmt.Errorf("affinity message kind %d unknown", m.kind)
	}
	if r.err == nil && len(r.b) != 0 {
		r.err = errMalformed
	}
	return m, r.err
}

func decodePicks(r *reader) []policy.Observation {
	n := r.uvarint(maxWireEntries)
	picks := make([]policy.Observation, 0, min(n, 64))
	for range n {
		o := policy.Observation{ReplicaID: r.string(), Session: r.uint64()}
		o.BlockChars = int(r.uvarint(1 << 20))
		nh := r.uvarint(policy.MaxShareBlocks)
		if r.err != nil || uint64(len(r.b)) < 8*nh {
			r.err = errMalformed
			return nil
		}
		o.Hashes = make([]uint64, nh)
		for i := range o.Hashes {
			o.Hashes[i] = r.uint64()
		}
		picks = append(picks, o)
	}
	return picks
}

func decodeLoad(r *reader) map[string]int {
	n := r.uvarint(maxWireEntries)
	load := make(map[string]int, min(n, 64))
	for range n {
		id := r.string()
		v := r.uvarint(1 << 31)
		if r.err != nil {
			return nil
		}
		load[id] += int(v)
	}
	return load
}
