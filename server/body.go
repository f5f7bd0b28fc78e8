package server

import (
	"errors"
	"io"
	"net/http"
	"os"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"
)

// prefetched is how much of a body fasthttp reads before calling the handler when it streams
// request bodies (fasthttp's readBodyWithStreaming): a body declared no longer than this (and
// than body_limit) is already in memory when the handler runs.
const prefetched = 8 << 10

// errBodyTooLarge: a body longer than server.body_limit arrived without a Content-Length.
var errBodyTooLarge = errors.New("request body is larger than server.body_limit")

// readBody reads the request body into memory before a handler sees it.
//
// fasthttp hands bodies over as a stream (fiber.Config.StreamRequestBody) after reading at
// most the first 8 KiB. Without that it allocated the whole declared Content-Length up front,
// so 5,000 connections each declaring 100,000 bytes and sending a few held 140 KiB each
// (700 MB). Here the buffer grows with the bytes that arrive, never with the length the
// client declared. A body declared or found longer than server.body_limit is a 413 (the
// connection then closes lingering, see finishBody); one that does not arrive within
// server.read_timeout, which fasthttp set on the connection when the request began, is a 408.
func (s *Server) readBody(c *fiber.Ctx) error {
	req := &c.Context().Request
	if !req.IsBodyStream() {
		return nil
	}
	limit := s.cfg.HTTP.BodyLimit
	declared := req.Header.ContentLength() // -1: chunked
	if declared > limit {
		return fiber.ErrRequestEntityTooLarge
	}
	body, err := readUpTo(c.Context().RequestBodyStream(), declared, limit)
	switch {
	case errors.Is(err, errBodyTooLarge):
		return fiber.ErrRequestEntityTooLarge
	case errors.Is(err, os.ErrDeadlineExceeded):
		s.m.bodyTimeouts.Inc()
		return &apiError{status: http.StatusRequestTimeout, typ: typeInvalidRequest, code: "request_timeout",
			message: "the request body did not arrive within server.read_timeout"}
	case err != nil:
		return badRequest("incomplete_body", "", "the request body ended before its declared length or its chunked encoding is malformed")
	}
	req.SetBodyRaw(body)
	return nil
}

// readUpTo reads r to its end: declared bytes when declared >= 0, else until EOF, failing with
// errBodyTooLarge past limit. Its buffer starts small and doubles (capped at declared), so it
// holds at most twice what arrived.
func readUpTo(r io.Reader, declared, limit int) ([]byte, error) {
	size := 4 << 10
	if declared >= 0 {
		size = min(size, declared)
	}
	buf := make([]byte, 0, max(size, 512))
	for {
		if declared >= 0 && len(buf) == declared {
			return buf, nil
		}
		if len(buf) == cap(buf) {
			next := min(2*cap(buf), limit+1)
			if declared >= 0 {
				next = min(next, declared)
			}
			buf = append(make([]byte, 0, next), buf...)
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if len(buf) > limit {
			return nil, errBodyTooLarge
		}
		switch {
		case errors.Is(err, io.EOF):
			if declared >= 0 && len(buf) != declared {
				return nil, io.ErrUnexpectedEOF
			}
			return buf, nil
		case err != nil:
			return nil, err
		}
	}
}

// finishBody runs after every request: when its body was not read (answered before that:
// 401, 404, 405, 413), fasthttp would parse the unread bytes as the next request on the
// connection. A body fasthttp had already read whole is dropped and the connection kept;
// otherwise the connection closes after the answer, lingering so the client still writing
// its body reads the answer instead of a reset.
func (s *Server) finishBody(ctx *fasthttp.RequestCtx) {
	req := &ctx.Request
	if !req.IsBodyStream() {
		return
	}
	cl := req.Header.ContentLength()
	if cl == 0 {
		return
	}
	if cl > 0 && cl <= min(prefetched, s.cfg.HTTP.BodyLimit) {
		_, _ = io.Copy(io.Discard, ctx.RequestBodyStream()) // in memory already: no wait
		return
	}
	ctx.SetConnectionClose()
	lingerConn(ctx.Conn())
}
