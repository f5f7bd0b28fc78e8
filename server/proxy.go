package server

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/triage-gw/triage/upstream"
)

// handleChat proxies POST /v1/chat/completions.
func (s *Server) handleChat(c *fiber.Ctx, rq *request) error {
	return s.proxy(c, rq, "/v1/chat/completions", decodeChat)
}

// handleCompletions proxies POST /v1/completions.
func (s *Server) handleCompletions(c *fiber.Ctx, rq *request) error {
	return s.proxy(c, rq, "/v1/completions", decodeCompletion)
}

// forwardedHeaders are the client headers passed upstream. Everything else stays here: the
// client's Authorization is for the gateway, and the replicas' own credentials come from
// their configured headers.
var forwardedHeaders = []string{"Accept", "User-Agent", "X-Request-Id", "Traceparent", "Tracestate", "Baggage"}

// forwardedHeader copies the forwarded client headers, refusing (before any classification or
// routing) a value that HTTP does not allow to be sent: no replica could take it, and the
// client must hear that it is its request that is wrong.
func forwardedHeader(c *fiber.Ctx) (http.Header, error) {
	header := make(http.Header)
	for _, k := range forwardedHeaders {
		v := c.Get(k)
		if v == "" {
			continue
		}
		if err := upstream.CheckHeader(k, v); err != nil {
			return nil, err
		}
		header.Set(k, strings.Clone(v))
	}
	return header, nil
}

// proxy classifies an OpenAI request, decides, and forwards it to the chosen pool with the
// model rewritten to that pool's. The answer, any status, streams back chunk by chunk; the
// slow-path slot is held until the upstream body has been closed.
func (s *Server) proxy(c *fiber.Ctx, rq *request, path string, decode func([]byte, limits) (proxyInput, error)) error {
	if err := requireJSON(c); err != nil {
		return err
	}
	// fiber reuses the request buffer after the handler returns, and a retry may replay the
	// body; the pool gets its own copy.
	body := bytes.Clone(c.Body())
	in, err := decode(body, s.lim)
	if err != nil {
		return err
	}
	s.m.notePasted(in.text)
	if in.context {
		if body, err = withoutField(body, "context"); err != nil {
			return err
		}
	}
	x, err := s.newExchange(c, rq, in.user, in.prompt, forwardedHeader)
	if err != nil {
		return err
	}
	defer x.end()
	if err := x.route(s, in.model, in.text.input); err != nil {
		return err
	}
	// A stream whose client did not ask for usage is sent asking for it, so its tokens are
	// counted like every other request's: most clients never ask, and the alternative, counting
	// chunks, misses the prompt tokens and miscounts servers that send several tokens a chunk.
	// The chunk that brings the usage is dropped before the client sees it (the stream it
	// asked for, byte for byte otherwise). pools.*.ask_stream_usage turns it off for servers
	// that refuse stream_options.
	askedUsage := in.stream && !in.includeUsage && in.usageAskable && x.r.Pool.AskStreamUsage()
	if askedUsage {
		if body, err = withStreamUsage(body); err != nil {
			return err
		}
	}
	resp, err := x.forward(path, body)
	if err != nil {
		return err
	}
	if in.stream {
		// Headers are here; from now on the pool's stream-idle timeout bounds the stream.
		x.dl.stopTimer()
	}
	if resp.Predicted {
		c.Set(HeaderPredictedCached, strconv.Itoa(resp.PredictedCachedTokens))
		c.Set(HeaderPendingCached, strconv.Itoa(resp.PendingCachedTokens))
	}
	setDisaggHeaders(c, resp)
	st := x.stream(s, resp)
	size := -1 // unknown: fasthttp writes the body chunked
	if !in.stream && !isEventStream(resp.Header.Get("Content-Type")) {
		if st.src, size, err = s.prefetch(c, resp); err != nil {
			resp.Body.Close()
			return x.dl.err(err)
		}
	}
	c.Status(resp.Status)
	copyResponseHeader(c, resp.Header)
	if resp.Status == http.StatusOK && isEventStream(resp.Header.Get("Content-Type")) {
		st.sse = newSSEFramer(resp.Body, func(err error) []byte {
			st.reported = true // errorResponse logs it
			return sseErrorEvent(errorResponse(err, s.log))
		})
		if askedUsage {
			st.sse.drop = usageChunkEvent
		}
		st.src = st.sse
	}
	// A prefetched answer's size is known, so it goes out with a Content-Length, headers and
	// body in one write.
	x.sendBody(st, size)
	return nil
}

// maxPrefetch bounds how much of a non-streaming answer is read before its headers are sent.
// Answers are a few KiB; a longer one is passed on without token headers.
const maxPrefetch = 1 << 20

// prefetch reads a non-streaming answer (up to maxPrefetch) before the response headers are
// written, so the tokens the replica reported can go into x-router-prompt-tokens and
// x-router-completion-tokens. It costs no latency: a non-streaming answer's body comes in one
// piece, when the generation is done. It returns what the client is to read: the bytes read,
// then the rest of the body, and the body's size when it was read whole (-1 when it was
// longer). A body that breaks off within them is an error, answered as any upstream failure
// (nothing has been sent yet).
func (s *Server) prefetch(c *fiber.Ctx, resp *upstream.Response) (io.Reader, int, error) {
	var buf bytes.Buffer
	n, err := buf.ReadFrom(io.LimitReader(resp.Body, maxPrefetch))
	if err != nil {
		return nil, -1, err
	}
	if n == maxPrefetch {
		return io.MultiReader(&buf, resp.Body), -1, nil
	}
	if u, ok := resp.Usage(); ok {
		c.Set(HeaderPromptTokens, strconv.Itoa(u.PromptTokens))
		c.Set(HeaderCompletionTokens, strconv.Itoa(u.CompletionTokens))
	}
	return &buf, int(n), nil
}

// failedReplica names the replica an upstream error came from, or "".
func failedReplica(err error) string {
	var ue *upstream.UpstreamError
	if errors.As(err, &ue) {
		return ue.Replica
	}
	return ""
}

// skippedResponseHeaders are managed by fasthttp or by this gateway.
var skippedResponseHeaders = map[string]bool{
	"Content-Length": true, "Transfer-Encoding": true, "Connection": true, "Date": true, "Server": true,
}

func copyResponseHeader(c *fiber.Ctx, h http.Header) {
	for k, vs := range h {
		ck := http.CanonicalHeaderKey(k)
		if skippedResponseHeaders[ck] || strings.HasPrefix(ck, "X-Router-") {
			continue
		}
		if ck == "Content-Type" {
			if len(vs) > 0 {
				c.Set(fiber.HeaderContentType, vs[0])
			}
			continue
		}
		for _, v := range vs {
			c.Response().Header.Add(ck, v)
		}
	}
}

// stream is the response body handed to fasthttp: it reads the replica's body as is and, on
// Close (exactly once, whatever ended the response), closes it — which cancels the upstream
// request if it had not finished — and runs done (slot release, request accounting).
//
// An SSE answer (200, text/event-stream) is read through an sseFramer, so that a replica
// that breaks off mid-stream leaves the client a clean end: the events sent whole, an error
// event in the OpenAI error shape, [DONE], and the chunked body's terminator. Any other body
// that breaks off ends without its terminating chunk, which the client sees as an incomplete
// response.
type stream struct {
	body          io.ReadCloser
	src           io.Reader  // body, or sse reading it
	sse           *sseFramer // nil unless the answer is an SSE stream
	reported      bool       // the break was logged when the error event was built
	log           *slog.Logger
	pool, replica string
	done          func()
	// conn is the client's connection and stall the longest one write to it may block
	// (server.write_stall_timeout; 0: no bound). Each chunk handed to fasthttp arms the
	// connection's write deadline, so a client that stops reading fails the next write
	// once its buffers are full; fasthttp then closes the stream, which releases the slot
	// and cancels the upstream request. stalled counts that.
	conn    net.Conn
	stall   time.Duration
	stalled prometheus.Counter

	once     sync.Once
	err      error     // first read error other than EOF; read and written by fasthttp's goroutine only
	eof      bool      // the upstream body was read to its end
	deadline time.Time // the write deadline last armed
}

func (st *stream) Read(p []byte) (int, error) {
	n, err := st.src.Read(p)
	switch {
	case st.sse != nil:
		st.eof, st.err = st.sse.eof, st.sse.err
	case errors.Is(err, io.EOF):
		st.eof = true
	case err != nil && st.err == nil:
		st.err = err
	}
	if n > 0 && st.stall > 0 && st.conn != nil {
		// Arm the deadline for the write that follows, not while waiting on the replica: an
		// expired deadline only fails a write, and the next Read arms a fresh one first.
		st.deadline = time.Now().Add(st.stall)
		_ = st.conn.SetWriteDeadline(st.deadline)
	}
	return n, err
}

func (st *stream) Close() error {
	var err error
	st.once.Do(func() {
		err = st.body.Close()
		if st.stall > 0 && st.conn != nil {
			if !st.eof && st.err == nil && !st.deadline.IsZero() && !time.Now().Before(st.deadline) {
				st.stalled.Inc()
				st.log.Warn("client stopped reading; response cut", "pool", st.pool, "replica", st.replica,
					"write_stall_timeout", st.stall.String())
			}
			// fasthttp does not clear a deadline it did not set: the next response on this
			// keep-alive connection must not inherit ours (TestStallDeadlineDoesNotOutliveItsStream).
			_ = st.conn.SetWriteDeadline(time.Time{})
		}
		if st.err != nil && !st.reported {
			st.log.Warn("upstream stream broke off", "pool", st.pool, "replica", st.replica, "err", st.err)
		}
		st.done()
	})
	return err
}
