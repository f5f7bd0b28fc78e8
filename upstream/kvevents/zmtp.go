package kvevents

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"time"
)

// A minimal ZMTP 3.0 SUB peer (rfc.zeromq.org/spec/23, NULL security): the
// greeting, the READY handshake, one subscription, then frames. It is
// written here rather than taken from a ZeroMQ library so that a frame's
// declared size is checked before anything is allocated for it: a pure-Go
// library that allocates whatever size the wire declares would let any
// publisher exhaust the gateway's memory with one header.

// handshakeTimeout bounds the greeting and READY exchange.
const handshakeTimeout = 5 * time.Second

// maxCommand bounds a command frame (READY, PING) that is read; a larger
// one is skipped unread.
const maxCommand = 4096

// maxFrameSize is the largest frame size accepted at all; beyond it the
// stream is not ZMTP (or is hostile) and the connection is dropped.
const maxFrameSize = 1 << 40

var errProtocol = errors.New("zmtp protocol error")

// zconn is one ZMTP connection to a publisher.
type zconn struct {
	nc  net.Conn
	br  *bufio.Reader
	max int // MaxMessageBytes
	buf []byte
	// frames of the latest message, slices of buf
	frames [][]byte
}

func newBufReader(nc net.Conn) *bufio.Reader { return bufio.NewReaderSize(nc, 64<<10) }

func greeting() []byte {
	g := make([]byte, 64)
	g[0], g[9] = 0xff, 0x7f
	g[10], g[11] = 3, 0 // ZMTP 3.0: subscriptions are sent as messages
	copy(g[12:], "NULL")
	return g
}

// newZConn runs the NULL-mechanism handshake as a SUB socket and
// subscribes to topic.
func newZConn(nc net.Conn, topic string, maxMessage int) (*zconn, error) {
	c, err := handshake(nc, "SUB", maxMessage)
	if err != nil {
		return nil, err
	}
	sub := append([]byte{1}, topic...)
	if _, err := nc.Write(frame(0, sub)); err != nil {
		return nil, err
	}
	_ = nc.SetDeadline(time.Time{})
	return c, nil
}

// peerTypes are the socket types each of ours may talk to.
var peerTypes = map[string][]string{"SUB": {"PUB", "XPUB"}, "DEALER": {"ROUTER", "DEALER"}, "ROUTER": {"DEALER", "REQ"}}

// handshake runs the NULL-mechanism handshake as a socket of type typ,
// leaving the handshake deadline set on nc for the caller to clear.
func handshake(nc net.Conn, typ string, maxMessage int) (*zconn, error) {
	c := &zconn{nc: nc, br: newBufReader(nc), max: maxMessage}
	_ = nc.SetDeadline(time.Now().Add(handshakeTimeout))
	if _, err := nc.Write(greeting()); err != nil {
		return nil, err
	}
	var peer [64]byte
	if _, err := io.ReadFull(c.br, peer[:]); err != nil {
		return nil, fmt.Errorf("read greeting: %w", err)
	}
	if peer[0] != 0xff || peer[9]&1 != 1 || peer[10] < 3 {
		return nil, fmt.Errorf("%w: not a ZMTP 3 greeting", errProtocol)
	}
	if string(trimNUL(peer[12:32])) != "NULL" {
		return nil, fmt.Errorf("%w: security mechanism %q (only NULL is supported)", errProtocol, trimNUL(peer[12:32]))
	}
	if _, err := nc.Write(command("READY", property("Socket-Type", typ))); err != nil {
		return nil, err
	}
	name, body, err := c.readCommand()
	if err != nil {
		return nil, fmt.Errorf("read READY: %w", err)
	}
	switch name {
	case "READY":
		if st, ok := readProperty(body, "Socket-Type"); ok && !slices.Contains(peerTypes[typ], st) {
			return nil, fmt.Errorf("%w: peer is a %s socket, which a %s cannot talk to", errProtocol, st, typ)
		}
	case "ERROR":
		return nil, fmt.Errorf("%w: peer refused: %q", errProtocol, body)
	default:
		return nil, fmt.Errorf("%w: expected READY, got %q", errProtocol, name)
	}
	return c, nil
}

// send writes one message of frames.
func (c *zconn) send(frames ...[]byte) error {
	var out []byte
	for i, f := range frames {
		var more byte
		if i < len(frames)-1 {
			more = 1
		}
		out = append(out, frame(more, f)...)
	}
	_, err := c.nc.Write(out)
	return err
}

func trimNUL(b []byte) []byte {
	for i, c := range b {
		if c == 0 {
			return b[:i]
		}
	}
	return b
}

func frame(flags byte, body []byte) []byte {
	if len(body) <= 255 {
		return append([]byte{flags, byte(len(body))}, body...)
	}
	out := make([]byte, 9, 9+len(body))
	out[0] = flags | 0x02
	binary.BigEndian.PutUint64(out[1:], uint64(len(body)))
	return append(out, body...)
}

func command(name string, data []byte) []byte {
	body := append([]byte{byte(len(name))}, name...)
	return frame(0x04, append(body, data...))
}

func property(name, value string) []byte {
	b := append([]byte{byte(len(name))}, name...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(value)))
	return append(b, value...)
}

// readProperty finds a property in a READY command's metadata.
func readProperty(b []byte, want string) (string, bool) {
	for len(b) > 0 {
		n := int(b[0])
		if len(b) < 1+n+4 {
			return "", false
		}
		name := string(b[1 : 1+n])
		vl := binary.BigEndian.Uint32(b[1+n:])
		b = b[1+n+4:]
		if uint64(len(b)) < uint64(vl) {
			return "", false
		}
		if name == want {
			return string(b[:vl]), true
		}
		b = b[vl:]
	}
	return "", false
}

// header reads a frame header.
func (c *zconn) header() (flags byte, size uint64, err error) {
	if flags, err = c.br.ReadByte(); err != nil {
		return 0, 0, err
	}
	if flags&0x02 != 0 {
		var b [8]byte
		if _, err = io.ReadFull(c.br, b[:]); err != nil {
			return 0, 0, err
		}
		size = binary.BigEndian.Uint64(b[:])
	} else {
		s, err := c.br.ReadByte()
		if err != nil {
			return 0, 0, err
		}
		size = uint64(s)
	}
	if size > maxFrameSize {
		return 0, 0, fmt.Errorf("%w: frame of %d bytes", errProtocol, size)
	}
	return flags, size, nil
}

// readCommand reads the next frame, which must be a command.
func (c *zconn) readCommand() (name string, data []byte, err error) {
	flags, size, err := c.header()
	if err != nil {
		return "", nil, err
	}
	if flags&0x04 == 0 || size > maxCommand || size < 1 {
		return "", nil, fmt.Errorf("%w: expected a command frame", errProtocol)
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(c.br, body); err != nil {
		return "", nil, err
	}
	n := int(body[0])
	if 1+n > len(body) {
		return "", nil, fmt.Errorf("%w: bad command name", errProtocol)
	}
	return string(body[1 : 1+n]), body[1+n:], nil
}

// next reads one message. oversize is true when the message exceeded the
// byte bound and was read past without being kept (frames then empty).
// Commands between messages are handled here: PING is answered with PONG,
// the others are ignored.
func (c *zconn) next() (frames [][]byte, oversize bool, err error) {
	c.buf, c.frames = c.buf[:0], c.frames[:0]
	var ends []int
	for {
		flags, size, err := c.header()
		if err != nil {
			return nil, false, err
		}
		if flags&0x04 != 0 {
			if err := c.onCommand(size); err != nil {
				return nil, false, err
			}
			continue
		}
		if oversize || uint64(len(c.buf))+size > uint64(c.max) {
			oversize = true
			if _, err := io.CopyN(io.Discard, c.br, int64(size)); err != nil {
				return nil, false, err
			}
		} else {
			start := len(c.buf)
			c.buf = slices.Grow(c.buf, int(size))[:start+int(size)]
			if _, err := io.ReadFull(c.br, c.buf[start:]); err != nil {
				return nil, false, err
			}
			ends = append(ends, len(c.buf))
		}
		if flags&0x01 == 0 {
			break
		}
	}
	if oversize {
		c.buf = c.buf[:0]
		return nil, true, nil
	}
	start := 0
	for _, e := range ends {
		c.frames = append(c.frames, c.buf[start:e])
		start = e
	}
	return c.frames, false, nil
}

// onCommand handles a command frame of size bytes between messages.
func (c *zconn) onCommand(size uint64) error {
	if size > maxCommand {
		_, err := io.CopyN(io.Discard, c.br, int64(size))
		return err
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(c.br, body); err != nil {
		return err
	}
	if len(body) < 1 || 1+int(body[0]) > len(body) {
		return nil
	}
	name, data := string(body[1:1+body[0]]), body[1+body[0]:]
	if name == "PING" && len(data) >= 2 {
		// PONG carries the PING's context back (after its 2-byte TTL).
		_ = c.nc.SetWriteDeadline(time.Now().Add(handshakeTimeout))
		_, err := c.nc.Write(command("PONG", data[2:]))
		_ = c.nc.SetWriteDeadline(time.Time{})
		return err
	}
	return nil
}
