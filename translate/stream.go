package translate

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
)

// maxLine bounds one SSE line of the chat stream; a replica sending a longer one breaks the
// stream (with an error event) rather than growing the gateway's memory.
const maxLine = 1 << 20

// errLineTooLong ends a stream whose replica sent a line longer than maxLine.
var errLineTooLong = errors.New("translate: chat stream line longer than 1 MiB")

// Stream reads a chat completion stream (server-sent events, "data:" chunks, [DONE]) and
// yields the Messages API's named events: message_start, ping, then per content block
// content_block_start, its deltas (text_delta, or input_json_delta for a tool call's
// arguments) and content_block_stop, then message_delta (stop reason, usage), message_stop.
// Every Read returns whole events.
//
// A chat stream that breaks off (a read error, or its end before [DONE] or a finish reason)
// ends with the bytes of OnBreak (an error event) instead; one whose replica sent an error
// object ends with that error as a Messages error event.
type Stream struct {
	r   chatReader
	req MessagesRequest
	// OnBreak returns the bytes that end a stream broken by err. Nil writes a Messages
	// error event of type api_error.
	OnBreak func(err error) []byte

	sseOut
	started bool
	block   int      // index of the open content block; -1 when none is open
	kind    string   // "text" or "tool_use" while a block is open
	tool    int      // the chat tool call index of the open tool_use block
	args    [][]byte // each tool_use block's arguments so far, for the stop reason
	id      string
	model   string
	finish  string
	matched json.RawMessage
	usage   *cUsage
	broken  error
}

// sseOut is the reading side of a translating stream: step appends the events that the next
// piece of the source produces to out, Read hands them out, and done says no more will come.
type sseOut struct {
	out  []byte
	off  int
	done bool
}

// read fills p from out, calling step whenever out is drained, until done.
func (o *sseOut) read(p []byte, step func()) (int, error) {
	for o.off == len(o.out) {
		if o.done {
			return 0, io.EOF
		}
		o.out, o.off = o.out[:0], 0
		step()
	}
	n := copy(p, o.out[o.off:])
	o.off += n
	return n, nil
}

// NewStream translates the chat stream src for the Messages request req.
func NewStream(src io.Reader, req MessagesRequest) *Stream {
	return &Stream{r: newChatReader(src), req: req, block: -1}
}

// Err is why the chat stream broke off, or nil.
func (s *Stream) Err() error { return s.broken }

func (s *Stream) Read(p []byte) (int, error) { return s.read(p, s.step) }

// step reads one line of the chat stream and appends what it produces to out.
func (s *Stream) step() {
	payload, ok, err := s.r.next()
	if ok {
		s.chunk(payload)
	}
	switch {
	case err == nil:
	case errors.Is(err, io.EOF):
		if s.finish != "" {
			s.end() // a replica that forgot [DONE] after finishing
		} else {
			s.fail(io.ErrUnexpectedEOF)
		}
	default:
		s.fail(err)
	}
}

// chatReader reads a chat completion stream line by line.
type chatReader struct {
	src  *bufio.Reader
	data []byte // a line longer than the buffer, gathered
	long bool   // the current line outgrew the buffer
}

func newChatReader(src io.Reader) chatReader {
	return chatReader{src: bufio.NewReaderSize(src, 16<<10)}
}

// next reads one line: ok with the payload of a whole "data:" line (valid until the next
// call), or nothing (part of a long line, a blank line, an event name, a comment); err is the
// read's error (io.EOF at the end, after the last line's payload) or errLineTooLong.
func (r *chatReader) next() (payload []byte, ok bool, err error) {
	line, err := r.src.ReadSlice('\n')
	partial := errors.Is(err, bufio.ErrBufferFull)
	if partial {
		err = nil
	}
	if len(line) == 0 {
		return nil, false, err
	}
	if partial || r.long {
		// Part of a long line: keep it whole up to maxLine.
		if len(r.data)+len(line) > maxLine {
			return nil, false, errLineTooLong
		}
		r.data = append(r.data, line...)
		r.long = partial
		if partial {
			return nil, false, nil
		}
		line, r.data = append([]byte(nil), r.data...), r.data[:0]
	}
	line = bytes.TrimRight(line, "\r\n")
	p, found := bytes.CutPrefix(line, []byte("data:"))
	if !found {
		return nil, false, err // event names, comments, ids: chat streams carry everything in data lines
	}
	return bytes.TrimPrefix(p, []byte(" ")), true, err
}

// chunk handles one chat stream data payload (chat streams put each chunk on one line).
func (s *Stream) chunk(payload []byte) {
	if string(payload) == "[DONE]" {
		s.end()
		return
	}
	var c struct {
		cCompletion
		Error *struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(payload, &c); err != nil {
		return // not a chunk: skipped, as a chat client would
	}
	if c.Error != nil {
		s.emit("error", json.RawMessage(ErrorBody("api_error", c.Error.Message)))
		s.done = true
		return
	}
	if !s.started {
		s.id, s.model = messageID(c.ID), c.Model
		s.start()
	}
	if c.Usage != nil {
		s.usage = c.Usage
	}
	for _, ch := range c.Choices {
		if t := ch.Delta.Content; t != nil && *t != "" {
			if s.kind != "text" {
				s.open("text", map[string]any{"type": "text", "text": ""})
			}
			s.delta(map[string]any{"type": "text_delta", "text": *t})
		}
		for _, tc := range ch.Delta.ToolCalls {
			idx := 0
			if tc.Index != nil {
				idx = *tc.Index
			}
			if s.kind != "tool_use" || s.tool != idx {
				s.open("tool_use", map[string]any{"type": "tool_use", "id": tc.ID, "name": tc.Function.Name, "input": map[string]any{}})
				s.tool = idx
				s.args = append(s.args, nil)
			}
			if tc.Function.Arguments != "" {
				s.delta(map[string]any{"type": "input_json_delta", "partial_json": tc.Function.Arguments})
				s.args[len(s.args)-1] = append(s.args[len(s.args)-1], tc.Function.Arguments...)
			}
		}
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			s.finish, s.matched = *ch.FinishReason, ch.StopReason
		}
	}
}

func (s *Stream) start() {
	s.started = true
	s.emit("message_start", map[string]any{"type": "message_start", "message": Message{
		ID: s.id, Type: "message", Role: "assistant", Model: s.model, Content: []map[string]any{}}})
	s.emit("ping", map[string]string{"type": "ping"})
}

func (s *Stream) open(kind string, block map[string]any) {
	s.close()
	s.block++
	if s.block < 0 {
		s.block = 0
	}
	s.kind = kind
	s.emit("content_block_start", map[string]any{"type": "content_block_start", "index": s.block, "content_block": block})
}

func (s *Stream) delta(d map[string]any) {
	s.emit("content_block_delta", map[string]any{"type": "content_block_delta", "index": s.block, "delta": d})
}

func (s *Stream) close() {
	if s.kind != "" {
		s.emit("content_block_stop", map[string]any{"type": "content_block_stop", "index": s.block})
		s.kind = ""
	}
}

// end closes the message: the open block, message_delta, message_stop.
func (s *Stream) end() {
	if s.done {
		return
	}
	if !s.started {
		s.start()
	}
	s.close()
	reason, seq := StopReason(s.finish, s.matched, s.req, callsOf(s.args))
	s.emit("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": reason, "stop_sequence": seq}, "usage": usageOf(s.usage)})
	s.emit("message_stop", map[string]string{"type": "message_stop"})
	s.done = true
}

func (s *Stream) fail(err error) {
	if s.done {
		return
	}
	s.broken, s.done = err, true
	if s.OnBreak != nil {
		s.out = append(s.out, s.OnBreak(err)...)
		return
	}
	s.emit("error", json.RawMessage(ErrorBody("api_error", "the upstream stream broke off")))
}

func (s *Stream) emit(name string, v any) {
	b, err := marshal(v)
	if err != nil {
		return // our own types always encode
	}
	s.out = append(s.out, "event: "...)
	s.out = append(s.out, name...)
	s.out = append(s.out, "\ndata: "...)
	s.out = append(s.out, b...)
	s.out = append(s.out, "\n\n"...)
}
