package kvevents

import (
	"encoding/binary"
	"errors"
	"math"
)

// errMsgpack is wrapped by every decoding error of a malformed payload.
var errMsgpack = errors.New("malformed msgpack")

// maxDepth bounds how deeply skip follows nested arrays and maps, so a
// payload of nested one-element arrays cannot exhaust the stack.
const maxDepth = 32

// reader is a cursor over one msgpack document. It never allocates: strings
// and binaries are returned as sub-slices of b, and every declared length is
// checked against the bytes left before anything loops over it, so a
// payload can cost at most time linear in its size. The first error sticks:
// after it every method returns zero values.
type reader struct {
	b   []byte
	i   int
	err error
}

func (r *reader) fail() {
	if r.err == nil {
		r.err = errMsgpack
	}
}

func (r *reader) ok() bool { return r.err == nil }

// need reports whether n more bytes are there, failing when not.
func (r *reader) need(n int) bool {
	if r.err != nil {
		return false
	}
	if n < 0 || len(r.b)-r.i < n {
		r.fail()
		return false
	}
	return true
}

func (r *reader) peek() byte {
	if !r.need(1) {
		return 0
	}
	return r.b[r.i]
}

func (r *reader) be(n int) uint64 {
	if !r.need(n) {
		return 0
	}
	var v uint64
	switch n {
	case 1:
		v = uint64(r.b[r.i])
	case 2:
		v = uint64(binary.BigEndian.Uint16(r.b[r.i:]))
	case 4:
		v = uint64(binary.BigEndian.Uint32(r.b[r.i:]))
	case 8:
		v = binary.BigEndian.Uint64(r.b[r.i:])
	}
	r.i += n
	return v
}

// length checks a declared element count: every element takes at least
// minBytes, so a count the rest of the payload cannot hold is an error.
func (r *reader) length(n uint64, minBytes int) int {
	if r.err != nil {
		return 0
	}
	if n > uint64(len(r.b)-r.i)/uint64(minBytes) {
		r.fail()
		return 0
	}
	return int(n)
}

// nilValue consumes a nil and reports whether there was one.
func (r *reader) nilValue() bool {
	if r.peek() == 0xc0 && r.err == nil {
		r.i++
		return true
	}
	return false
}

// arrayLen reads an array header; ok is false (nothing consumed) when the
// next value is not an array.
func (r *reader) arrayLen() (n int, ok bool) {
	switch c := r.peek(); {
	case r.err != nil:
		return 0, false
	case c >= 0x90 && c <= 0x9f:
		r.i++
		return r.length(uint64(c&0x0f), 1), r.ok()
	case c == 0xdc:
		r.i++
		return r.length(r.be(2), 1), r.ok()
	case c == 0xdd:
		r.i++
		return r.length(r.be(4), 1), r.ok()
	}
	return 0, false
}

// mapLen reads a map header; ok is false (nothing consumed) when the next
// value is not a map.
func (r *reader) mapLen() (n int, ok bool) {
	switch c := r.peek(); {
	case r.err != nil:
		return 0, false
	case c >= 0x80 && c <= 0x8f:
		r.i++
		return r.length(uint64(c&0x0f), 2), r.ok()
	case c == 0xde:
		r.i++
		return r.length(r.be(2), 2), r.ok()
	case c == 0xdf:
		r.i++
		return r.length(r.be(4), 2), r.ok()
	}
	return 0, false
}

// bytesValue reads a str or bin value as a sub-slice of the payload.
func (r *reader) bytesValue() (b []byte, ok bool) {
	var n uint64
	switch c := r.peek(); {
	case r.err != nil:
		return nil, false
	case c >= 0xa0 && c <= 0xbf:
		r.i++
		n = uint64(c & 0x1f)
	case c == 0xd9 || c == 0xc4:
		r.i++
		n = r.be(1)
	case c == 0xda || c == 0xc5:
		r.i++
		n = r.be(2)
	case c == 0xdb || c == 0xc6:
		r.i++
		n = r.be(4)
	default:
		return nil, false
	}
	l := r.length(n, 1)
	if !r.need(l) {
		return nil, false
	}
	b = r.b[r.i : r.i+l : r.i+l]
	r.i += l
	return b, true
}

// intValue reads any msgpack integer as its 64 bits (a negative one in
// two's complement) and whether it was negative.
func (r *reader) intValue() (bits uint64, neg, ok bool) {
	c := r.peek()
	if r.err != nil {
		return 0, false, false
	}
	switch {
	case c <= 0x7f:
		r.i++
		return uint64(c), false, true
	case c >= 0xe0:
		r.i++
		return uint64(int64(int8(c))), true, true
	case c >= 0xcc && c <= 0xcf:
		r.i++
		v := r.be(1 << (c - 0xcc))
		return v, false, r.ok()
	case c >= 0xd0 && c <= 0xd3:
		r.i++
		n := 1 << (c - 0xd0)
		v := r.be(n)
		shift := 64 - 8*n
		s := int64(v<<shift) >> shift // sign-extend
		return uint64(s), s < 0, r.ok()
	}
	return 0, false, false
}

// floatValue reads a float or an integer as a float64.
func (r *reader) floatValue() (float64, bool) {
	switch r.peek() {
	case 0xca:
		r.i++
		v := math.Float32frombits(uint32(r.be(4)))
		return float64(v), r.ok()
	case 0xcb:
		r.i++
		return math.Float64frombits(r.be(8)), r.ok()
	}
	bits, neg, ok := r.intValue()
	if neg {
		return float64(int64(bits)), ok
	}
	return float64(bits), ok
}

// skip consumes one value of any type, nested values included.
func (r *reader) skip() { r.skipDepth(0) }

func (r *reader) skipDepth(depth int) {
	if depth > maxDepth {
		r.fail()
		return
	}
	c := r.peek()
	if r.err != nil {
		return
	}
	switch {
	case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
		r.i++
	case c >= 0xcc && c <= 0xd3:
		r.intValue()
	case c == 0xca || c == 0xcb:
		r.floatValue()
	case (c >= 0xa0 && c <= 0xbf) || c == 0xd9 || c == 0xda || c == 0xdb || c == 0xc4 || c == 0xc5 || c == 0xc6:
		r.bytesValue()
	case (c >= 0x90 && c <= 0x9f) || c == 0xdc || c == 0xdd:
		n, _ := r.arrayLen()
		for range n {
			r.skipDepth(depth + 1)
		}
	case (c >= 0x80 && c <= 0x8f) || c == 0xde || c == 0xdf:
		n, _ := r.mapLen()
		for range 2 * n {
			r.skipDepth(depth + 1)
		}
	case c >= 0xd4 && c <= 0xd8: // fixext: type byte + 1..16 bytes
		r.i++
		if n := 1 + 1<<(c-0xd4); r.need(n) {
			r.i += n
		}
	case c >= 0xc7 && c <= 0xc9: // ext 8/16/32: length, type byte, data
		r.i++
		n := r.length(r.be(1<<(c-0xc7)), 1)
		if r.need(1 + n) {
			r.i += 1 + n
		}
	default: // 0xc1 is never used
		r.fail()
	}
}
