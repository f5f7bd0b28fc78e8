package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"

	"github.com/triage-gw/triage/upstream"
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
	// drop, when set, is asked about every complete event (its bytes up to and including the
	// blank line); an event it returns true for is not handed on. Nil keeps every event.
	drop func(event []byte) bool
	// dropLF: a dropped event ended in a CR that was the last byte read; the LF completing
	// that CRLF, if it comes first in the next read, goes with it.
	dropLF bool

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
	old, prev := len(f.buf), f.ready
	n, err := f.src.Read(f.buf[old:cap(f.buf)])
	f.buf = f.buf[:old+n]
	if f.dropLF && n > 0 {
		f.dropLF = false
		if f.buf[old] == '\n' {
			f.buf = append(f.buf[:old], f.buf[old+1:]...)
			f.lines.afterCR = false
		}
	}
	f.lines.record = f.drop != nil
	f.ready = f.lines.scan(f.buf, old, f.ready)
	if f.drop != nil {
		f.dropEvents(prev)
	}
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

// dropEvents removes the events drop refuses from the events completed by the last scan,
// which start at from and end at the offsets the scan recorded; none was handed on yet.
func (f *sseFramer) dropEvents(from int) {
	ends := f.lines.ends
	f.lines.ends = ends[:0]
	w, start := from, from
	for _, end := range ends {
		if !f.drop(f.buf[start:end]) {
			w += copy(f.buf[w:], f.buf[start:end])
		} else if end == len(f.buf) && f.lines.afterCR {
			f.dropLF = true
		}
		start = end
	}
	if w == start {
		return // nothing dropped
	}
	n := copy(f.buf[w:], f.buf[f.ready:]) // the partial event follows the kept ones
	f.buf, f.ready = f.buf[:w+n], w
}

// usageChunkEvent reports whether an SSE event is the stream's usage-only chunk (see
// upstream.IsUsageChunk): the one the gateway asked for when the client did not.
func usageChunkEvent(event []byte) bool {
	var data []byte
	lines := 0
	for line := range bytes.Lines(event) {
		line = bytes.TrimRight(line, "\r\n")
		if payload, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			data = bytes.TrimPrefix(payload, []byte(" "))
			lines++
		}
	}
	return lines == 1 && upstream.IsUsageChunk(data)
}

// sseLines follows SSE line structure across reads to find where events end: at an empty
// line, lines ending in LF, CRLF or CR (the HTML standard's event-stream grammar).
type sseLines struct {
	midLine bool // the last byte was inside a line
	afterCR bool // the last byte was a CR, which an LF may complete
	// With record set, scan appends every event end it finds to ends.
	record bool
	ends   []int
}

// end records an event end at i, or moves the last one there when an LF completes the CR
// that ended it.
func (l *sseLines) end(i int) {
	if !l.record {
		return
	}
	if n := len(l.ends); n > 0 && l.ends[n-1] == i-1 {
		l.ends[n-1] = i
		return
	}
	l.ends = append(l.ends, i)
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
					l.end(ready)
				}
				continue
			}
			if !l.midLine {
				ready = j + 1
				l.end(ready)
			}
			l.midLine = false
		case '\r':
			if !l.midLine {
				ready = j + 1
				l.end(ready)
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
