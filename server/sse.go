package server

import (
	"encoding/json"
	"errors"
	"io"
	"mime"
)

// maxHeldEvent bounds how much of one SSE event is held back waiting for its end. An event
// longer than this (no replica sends one) is passed on as it arrives, and a break in it can
// then leave it cut.
const maxHeldEvent = 1 << 20

// isEventStream reports a Content-Type of text/event-stream.
func isEventStream(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && mt == "text/event-stream"
}

// sseFramer passes a replica's server-sent-event stream on in whole events: bytes are handed
// on up to the end of the last complete event (a blank line) and the rest is held until its
// event is complete. So when the replica's stream breaks off, what the client has received
// ends on an event boundary, and the stream can be ended cleanly with the bytes of onBreak
// (an error event and [DONE]) instead of being cut in the middle of an event. Events pass
// through byte for byte, as soon as they are complete.
type sseFramer struct {
	src     io.Reader
	onBreak func(error) []byte

	buf       []byte
	lo, ready int // buf[lo:ready]: whole events not yet handed on; buf[ready:]: a partial one
	lines     sseLines
	eof       bool
	err       error // how src broke off; nil when it ended cleanly
}

func newSSEFramer(src io.Reader, onBreak func(error) []byte) *sseFramer {
	return &sseFramer{src: src, onBreak: onBreak, buf: make([]byte, 0, 4<<10)}
}

// Read hands on whole events; after a break, the partial event is dropped, onBreak's bytes
// follow, and then io.EOF.
func (f *sseFramer) Read(p []byte) (int, error) {
	for f.lo == f.ready {
		if f.eof || f.err != nil {
			return 0, io.EOF
		}
		f.fill()
	}
	n := copy(p, f.buf[f.lo:f.ready])
	f.lo += n
	return n, nil
}

// fill reads once from src. Called when everything whole was handed on (lo == ready).
func (f *sseFramer) fill() {
	if f.lo > 0 { // move the partial event to the front
		n := copy(f.buf[:cap(f.buf)], f.buf[f.lo:])
		f.buf, f.ready, f.lo = f.buf[:n], 0, 0
	}
	if len(f.buf) == cap(f.buf) {
		if len(f.buf) >= maxHeldEvent { // give up holding an event this long
			f.ready = len(f.buf)
			return
		}
		f.buf = append(make([]byte, 0, 2*cap(f.buf)), f.buf...)
	}
	old := len(f.buf)
	n, err := f.src.Read(f.buf[old:cap(f.buf)])
	f.buf = f.buf[:old+n]
	f.ready = f.lines.scan(f.buf, old, f.ready)
	switch {
	case errors.Is(err, io.EOF):
		f.eof = true
		f.ready = len(f.buf) // the replica ended its stream itself: pass on what it sent
	case err != nil:
		f.err = err
		f.buf = append(f.buf[:f.ready], f.onBreak(err)...)
		f.ready = len(f.buf)
	}
}

// sseLines follows SSE line structure across reads to find where events end: at an empty
// line, lines ending in LF, CRLF or CR (the HTML standard's event-stream grammar).
type sseLines struct {
	midLine bool // the last byte was inside a line
	afterCR bool // the last byte was a CR, which an LF may complete
}

// scan feeds b[from:] and returns the offset just past the last event end in it, or ready
// when there is none. ready is the previous result (an LF that completes the CR ending an
// event belongs to that end).
func (l *sseLines) scan(b []byte, from, ready int) int {
	for j := from; j < len(b); j++ {
		switch b[j] {
		case '\n':
			if l.afterCR {
				l.afterCR = false
				if ready == j {
					ready = j + 1
				}
				continue
			}
			if !l.midLine {
				ready = j + 1
			}
			l.midLine = false
		case '\r':
			if !l.midLine {
				ready = j + 1
			}
			l.midLine, l.afterCR = false, true
		default:
			l.midLine, l.afterCR = true, false
		}
	}
	return ready
}

// sseErrorEvent is how the gateway ends a stream the replica broke off: an event named error
// whose data is the OpenAI error object (what OpenAI's clients raise as an APIError), then
// [DONE] for clients that read until it.
func sseErrorEvent(ae *apiError) []byte {
	b, _ := json.Marshal(ae.body())
	out := make([]byte, 0, len(b)+48)
	out = append(out, "event: error\ndata: "...)
	out = append(out, b...)
	return append(out, "\n\ndata: [DONE]\n\n"...)
}
