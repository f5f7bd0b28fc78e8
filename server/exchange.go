package server

import (
	"bytes"
	"net/http"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/triage-gw/triage/router"
	"github.com/triage-gw/triage/upstream"
	"github.com/triage-gw/triage/upstream/policy"
)

// exchange is one generation request (chat or text completion, Messages, Responses) from
// its routing to its answer: its deadline, its route, and what goes to the replica's pool
// with the body (the forwarded headers, and what a replica policy picks by). The generation
// handlers share it. Each defers end, which stops watching the client and, unless the answer
// took them over (sendAnswer, sendStream), releases the route and ends the deadline.
type exchange struct {
	c  *fiber.Ctx
	rq *request
	dl *deadline
	r  router.Route

	header  http.Header    // the request's headers as the replica gets them
	routing policy.Request // the prompt, its size, user, session and TTFT target

	routed, watching, handedOff bool
}

// newExchange reads what every generation request carries besides its body: the headers
// forwarded (forward picks which, per API), the routing keys (the body's user field, else
// x-session-id) and the TTFT target (x-slo-ttft); then it starts the request's deadline. A
// bad header is the client's 400, before any deadline.
func (s *Server) newExchange(c *fiber.Ctx, rq *request, user, prompt string, forward func(*fiber.Ctx) (http.Header, error)) (*exchange, error) {
	// Copied (fiber reuses request memory) and bounded in bytes (the policies keep them).
	user = routingKey(user)
	session := routingKey(strings.Clone(c.Get(HeaderSession)))
	if session == "" {
		session = user
	}
	header, err := forward(c)
	if err != nil {
		return nil, err
	}
	target, err := sloTarget(c)
	if err != nil {
		return nil, err
	}
	return &exchange{c: c, rq: rq, dl: s.newDeadline(), header: header, routing: policy.Request{
		Prompt: prompt, InputTokens: len(prompt) / 4, User: user, Session: session, TTFTTarget: target}}, nil
}

// route routes the request by its model field and text (Server.routeModel).
func (x *exchange) route(s *Server, model, text string) error {
	r, err := s.routeModel(x.dl.ctx, x.rq, model, text)
	if err != nil {
		return x.dl.err(err)
	}
	x.setRoute(r)
	return nil
}

// setRoute makes r the request's route (end releases it) and writes the decision headers.
func (x *exchange) setRoute(r router.Route) {
	x.r, x.routed = r, true
	setRouteHeaders(x.c, x.rq, &x.r)
}

// request is what the pool is sent: body to path, the model field set to the replica's.
func (x *exchange) request(path string, body []byte) *upstream.ForwardRequest {
	return &upstream.ForwardRequest{Method: http.MethodPost, Path: path, Header: x.header, Body: body,
		SetModel: true, Routing: x.routing}
}

// watchClient has a client that leaves cancel the upstream request, from now until the
// handler returns (the client's connection is not read meanwhile: the watcher looks at it).
func (x *exchange) watchClient() {
	x.dl.watchClient(x.c.Context().Conn())
	x.watching = true
}

// forward sends body to path on a replica the route's pool picks, the client watched; the
// replica is named in x-router-replica, a failed one too.
func (x *exchange) forward(path string, body []byte) (*upstream.Response, error) {
	x.watchClient()
	resp, err := x.r.Pool.Do(x.dl.ctx, x.request(path, body))
	if err != nil {
		if id := failedReplica(err); id != "" {
			x.c.Set(HeaderReplica, id)
		}
		return nil, x.dl.err(err)
	}
	x.c.Set(HeaderReplica, resp.ReplicaID)
	return resp, nil
}

// stream is the response body relaying resp to the client; when it ends it counts the
// replica's usage and releases the route and the deadline.
func (x *exchange) stream(s *Server, resp *upstream.Response) *stream {
	return s.newStream(x.c, x.rq, x.dl, &x.r, resp)
}

// sendBody hands st to fasthttp as the response body, size bytes long (-1: unknown, sent
// chunked, flushed after every Read, so SSE events pass through as the replica sends them).
// The request is st's from here on: fasthttp closes it when the response is written, when
// writing fails (client gone) and when the response is reset, and closing it ends the
// request's accounting.
func (x *exchange) sendBody(st *stream, size int) {
	x.handedOff = true
	x.rq.deferred = true
	x.c.Response().SetBodyStream(st, size)
}

// sendStream is sendBody for a body of unknown length (a stream).
func (x *exchange) sendStream(st *stream) { x.sendBody(st, -1) }

// sendAnswer is sendBody for an answer read whole (b): it goes out with its Content-Length,
// headers and body in one write, not chunked (whose terminating chunk was a second write
// the client waited for). st, holding the replica's body, is still closed after the write.
func (x *exchange) sendAnswer(st *stream, b []byte) {
	st.src = bytes.NewReader(b)
	x.sendBody(st, len(b))
}

// end is deferred by the handler: see exchange.
func (x *exchange) end() {
	if x.watching {
		x.dl.unwatchClient()
	}
	if x.handedOff {
		return
	}
	if x.routed {
		x.r.Release()
	}
	x.dl.end()
}
