package server

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"

	"github.com/gofiber/fiber/v2"

	"github.com/triage-gw/triage/upstream"
	"github.com/triage-gw/triage/upstream/policy"
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
	if in.context {
		if body, err = withoutField(body, "context"); err != nil {
			return err
		}
	}
	session := c.Get(HeaderSession)
	if session == "" {
		session = in.user
	}
	session = strings.Clone(session)
	header, err := forwardedHeader(c)
	if err != nil {
		return err
	}

	dl := s.newDeadline()
	handedOff := false
	defer func() {
		if !handedOff {
			dl.end()
		}
	}()
	r, err := s.route(dl.ctx, rq, in.text.input)
	if err != nil {
		return dl.err(err)
	}
	defer func() {
		if !handedOff {
			r.Release()
		}
	}()
	setRouteHeaders(c, rq, &r)
	resp, err := r.Pool.Do(dl.ctx, &upstream.ForwardRequest{
		Method:   http.MethodPost,
		Path:     path,
		Header:   header,
		Body:     body,
		SetModel: true,
		Routing:  policy.Request{Prompt: in.prompt, InputTokens: len(in.prompt) / 4, User: in.user, Session: session},
	})
	if err != nil {
		return dl.err(err)
	}
	if in.stream {
		// Headers are here; from now on the pool's stream-idle timeout bounds the stream.
		dl.stopTimer()
	}
	c.Set(HeaderReplica, resp.ReplicaID)
	c.Status(resp.Status)
	copyResponseHeader(c, resp.Header)
	st := &stream{
		body:    resp.Body,
		log:     s.log,
		pool:    r.Pool.Name(),
		replica: resp.ReplicaID,
		done: func() {
			r.Release()
			dl.end()
			rq.finish()
		},
	}
	handedOff = true
	rq.deferred = true
	// fasthttp writes a body stream of unknown size chunked, flushing after every Read, so
	// SSE events pass through as the replica sends them; it closes the stream when the
	// response is written, when writing fails (client gone) and when the response is reset.
	c.Response().SetBodyStream(st, -1)
	return nil
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
type stream struct {
	body          io.ReadCloser
	log           *slog.Logger
	pool, replica string
	done          func()

	once sync.Once
	err  error // first read error other than EOF; read and written by fasthttp's goroutine only
}

func (st *stream) Read(p []byte) (int, error) {
	n, err := st.body.Read(p)
	if err != nil && !errors.Is(err, io.EOF) && st.err == nil {
		st.err = err
	}
	return n, err
}

func (st *stream) Close() error {
	var err error
	st.once.Do(func() {
		err = st.body.Close()
		if st.err != nil {
			st.log.Warn("upstream stream broke off", "pool", st.pool, "replica", st.replica, "err", st.err)
		}
		st.done()
	})
	return err
}
