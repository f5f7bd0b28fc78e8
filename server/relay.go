package server

import (
	"io"
	"strconv"

	"github.com/gofiber/fiber/v2"

	"github.com/triage-gw/triage/router"
	"github.com/triage-gw/triage/upstream"
)

// newStream is the response body of an upstream answer to a routed request, as proxy builds
// it: reading src (the replica's body unless the caller sets another), closing the replica's
// body when fasthttp is done with it, and then the route's accounting: its tokens, its slot,
// the deadline and the request's in-flight count.
func (s *Server) newStream(c *fiber.Ctx, rq *request, dl *deadline, r *router.Route, resp *upstream.Response) *stream {
	return &stream{
		body:    resp.Body,
		src:     resp.Body,
		log:     s.log,
		pool:    r.Pool.Name(),
		replica: resp.ReplicaID,
		conn:    c.Context().Conn(),
		stall:   s.cfg.HTTP.WriteStallTimeout,
		stalled: s.m.writeStalls,
		done: func() {
			if u, ok := resp.Usage(); ok {
				r.Used(u)
			}
			r.Release()
			dl.end()
			rq.finish()
		},
	}
}

// readAnswer reads a non-streamed answer whole (up to maxPrefetch; a longer one is an
// upstream failure: no answer of these APIs is that long) and sets the token headers from
// the replica's usage.
func readAnswer(c *fiber.Ctx, resp *upstream.Response, pool string) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxPrefetch+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxPrefetch {
		return nil, &upstream.UpstreamError{Pool: pool, Replica: resp.ReplicaID, Err: errAnswerTooLong}
	}
	if u, ok := resp.Usage(); ok {
		c.Set(HeaderPromptTokens, strconv.Itoa(u.PromptTokens))
		c.Set(HeaderCompletionTokens, strconv.Itoa(u.CompletionTokens))
	}
	return b, nil
}
