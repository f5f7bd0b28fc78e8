package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/triage-gw/triage/translate"
	"github.com/triage-gw/triage/upstream"
)

// HeaderAffinity is set on a Responses request sent to the replica that holds its state:
// "previous_response_id" for a continuation, "response_id" for GET and DELETE by id.
const HeaderAffinity = "x-router-affinity"

// responseNotFound is the answer for an id the gateway does not know (never seen, expired,
// evicted or deleted), in the Responses error shape.
func responseNotFound(id, param string) *apiError {
	return &apiError{status: http.StatusNotFound, typ: typeInvalidRequest, code: "response_not_found", param: param,
		message: fmt.Sprintf("Response with id %s not found: this gateway does not know which replica stored it "+
			"(never stored through this gateway, expired after server.response_affinity_ttl, evicted, or deleted)", clip(id))}
}

// homeUnavailable maps DoOn's errors for a response's home replica: gone from the pool's
// configuration (its state is lost: 404), or unavailable now, a refused connection included
// (503, it may come back).
func homeUnavailable(err error, id, param string, home responseHome) error {
	switch {
	case errors.Is(err, upstream.ErrUnknownReplica):
		return &apiError{status: http.StatusNotFound, typ: typeInvalidRequest, code: "response_not_found", param: param,
			message: fmt.Sprintf("Response with id %s not found: replica %s/%s that stored it is no longer configured", clip(id), home.Pool, home.Replica)}
	case errors.Is(err, upstream.ErrReplicaUnavailable):
		return &apiError{status: http.StatusServiceUnavailable, typ: typeUnavailable, code: "replica_unavailable", param: param,
			message:    fmt.Sprintf("replica %s/%s, which stores response %s, is unavailable (unreachable, unhealthy, ejected or full); retry later", home.Pool, home.Replica, clip(id)),
			retryAfter: "1"}
	}
	return err
}

// handleResponses serves POST /v1/responses. A new conversation is classified, decided and
// admitted like a chat completion; a pool that does not speak the Responses API gets it
// translated to a chat completion (text only: translate.ResponsesToChat), and the answer is
// neither stored nor recorded. A continuation (previous_response_id) goes to the pool and
// replica that stored the previous response, unclassified: vLLM keeps stored responses in
// that replica's memory only, so no other replica could answer it. The id of every stored
// response is recorded from the replica's answer (the body's id, or the stream's
// response.created event).
func (s *Server) handleResponses(c *fiber.Ctx, rq *request) error {
	if err := requireJSON(c); err != nil {
		return err
	}
	body := bytes.Clone(c.Body())
	in, err := decodeResponses(body, s.lim)
	if err != nil {
		return err
	}
	s.m.notePasted(in.text)
	x, err := s.newExchange(c, rq, in.user, in.prompt, forwardedHeader)
	if err != nil {
		return err
	}
	defer x.end()
	var home responseHome
	if in.previous != "" {
		// A continuation goes where its previous response is stored, whatever it says.
		var ok bool
		var pool *upstream.Pool
		if home, ok = s.responses.Get(c.UserContext(), in.previous); ok {
			pool = s.poolNamed(home.Pool)
		}
		if pool == nil {
			return responseNotFound(in.previous, "previous_response_id")
		}
		r, err := s.router.Pin(pool == s.slow)
		if err != nil {
			return x.dl.err(err)
		}
		s.m.routerLatency.Observe(r.Decided.Sub(rq.arrival).Seconds())
		x.setRoute(r)
	} else if err := x.route(s, in.model, in.text.input); err != nil {
		return err
	}
	// A continuation's pool stored its previous response, so it speaks the API: a translated
	// response is never recorded.
	native := in.previous != "" || x.r.Pool.Serves(upstream.APIResponses)
	path, fwd := "/v1/responses", body
	var treq translate.ResponsesRequest
	if !native {
		if fwd, treq, err = translate.ResponsesToChat(body, x.r.Pool.AskStreamUsage()); err != nil {
			if u, ok := errors.AsType[*translate.Untranslatable](err); ok {
				return &apiError{status: http.StatusBadRequest, typ: typeInvalidRequest, code: "api_not_supported", param: u.Param,
					message: fmt.Sprintf("%s: the request was routed to pool %s, whose replicas do not serve the Responses API (pools.%s.apis), so it is translated to chat completions, where this field has no form",
						u.Error(), x.r.Pool.Name(), x.r.Pool.Name())}
			}
			return badRequest("invalid_body", "", "%v", err)
		}
		path = "/v1/chat/completions"
		c.Set(HeaderTranslated, "chat")
	}
	var resp *upstream.Response
	if in.previous != "" {
		c.Set(HeaderAffinity, "previous_response_id")
		x.watchClient()
		if resp, err = x.r.Pool.DoOn(x.dl.ctx, home.Replica, x.request(path, fwd)); err != nil {
			c.Set(HeaderReplica, home.Replica) // whatever the failure, the one replica it could go to
			return x.dl.err(homeUnavailable(err, in.previous, "previous_response_id", home))
		}
		c.Set(HeaderReplica, resp.ReplicaID)
	} else if resp, err = x.forward(path, fwd); err != nil {
		return err
	}
	at := responseHome{Pool: x.r.Pool.Name(), Replica: resp.ReplicaID}
	st := x.stream(s, resp)
	eventStream := resp.Status == http.StatusOK && isEventStream(resp.Header.Get("Content-Type"))
	if !native {
		return s.sendTranslatedResponse(x, resp, st, treq, eventStream, in.stream)
	}
	if eventStream {
		if in.stream {
			x.dl.stopTimer()
		}
		st.sse = newSSEFramer(resp.Body, func(err error) []byte {
			st.reported = true
			return sseErrorEvent(errorResponse(err, s.log))
		})
		if in.store {
			recorded := false
			// Sees every whole event and keeps them all: the id is in response.created, first.
			st.sse.drop = func(event []byte) bool {
				if !recorded {
					if id := createdResponseID(event); id != "" {
						s.responses.Put(id, at)
						recorded = true
					}
				}
				return false
			}
		}
		st.src = st.sse
	} else {
		b, err := readAnswer(c, resp, x.r.Pool.Name())
		if err != nil {
			resp.Body.Close()
			return x.dl.err(err)
		}
		if in.store && resp.Status >= 200 && resp.Status < 300 {
			var v struct {
				ID string `json:"id"`
			}
			if json.Unmarshal(b, &v) == nil && v.ID != "" {
				s.responses.Put(v.ID, at)
			}
		}
		c.Status(resp.Status)
		copyResponseHeader(c, resp.Header)
		x.sendAnswer(st, b)
		return nil
	}
	c.Status(resp.Status)
	copyResponseHeader(c, resp.Header)
	x.sendStream(st)
	return nil
}

// sendTranslatedResponse answers a Responses request that went to a chat-only pool as a chat
// completion: the chat answer translated back (translate.ChatToResponse, or a
// translate.ResponsesStream for a stream), a chat error passed on as it is (both APIs share
// the OpenAI error shape). Nothing is recorded for affinity: the replica stored nothing.
func (s *Server) sendTranslatedResponse(x *exchange, resp *upstream.Response, st *stream, treq translate.ResponsesRequest,
	eventStream, streamed bool) error {
	c := x.c
	if eventStream {
		if streamed {
			x.dl.stopTimer() // from here the pool's stream-idle timeout bounds the stream
		}
		ts := translate.NewResponsesStream(resp.Body, treq)
		ts.OnBreak = func(err error) []byte {
			st.reported = true // errorResponse logs it
			return sseErrorEvent(errorResponse(err, s.log))
		}
		st.src = ts
		c.Status(http.StatusOK)
		copyResponseHeader(c, resp.Header)
	} else {
		b, err := readAnswer(c, resp, x.r.Pool.Name())
		if err != nil {
			resp.Body.Close()
			return x.dl.err(err)
		}
		if resp.Status >= 200 && resp.Status < 300 {
			if b, err = translate.ChatToResponse(b, treq); err != nil {
				resp.Body.Close()
				return s.untranslatable(x.r.Pool.Name(), resp.ReplicaID, "response", err)
			}
		}
		c.Status(resp.Status)
		copyResponseHeader(c, resp.Header)
		c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
		x.sendAnswer(st, b)
		return nil
	}
	x.sendStream(st)
	return nil
}

// createdResponseID returns the response id of a response.created event, or "".
func createdResponseID(event []byte) string {
	for line := range bytes.Lines(event) {
		data, ok := bytes.CutPrefix(bytes.TrimRight(line, "\r\n"), []byte("data:"))
		if !ok || !bytes.Contains(data, []byte(`"response.created"`)) {
			continue
		}
		var v struct {
			Type     string `json:"type"`
			Response struct {
				ID string `json:"id"`
			} `json:"response"`
		}
		if json.Unmarshal(data, &v) == nil && v.Type == "response.created" {
			return v.Response.ID
		}
	}
	return ""
}

// handleResponseByID serves GET and DELETE /v1/responses/{id} on the replica that stored the
// response; a DELETE it accepts also forgets the id here.
func (s *Server) handleResponseByID(c *fiber.Ctx, _ *request) error {
	id, err := url.PathUnescape(c.Params("id"))
	if err != nil || id == "" {
		return badRequest("invalid_value", "response_id", "response id: must be a non-empty path segment")
	}
	id = strings.Clone(id)
	home, ok := s.responses.Get(c.UserContext(), id)
	pool := s.poolNamed(home.Pool)
	if !ok || pool == nil {
		return responseNotFound(id, "response_id")
	}
	header, err := forwardedHeader(c)
	if err != nil {
		return err
	}
	method := strings.Clone(c.Method())
	path := "/v1/responses/" + url.PathEscape(id)
	if q := c.Request().URI().QueryString(); len(q) > 0 {
		path += "?" + string(q)
	}
	dl := s.newDeadline()
	defer dl.end()
	c.Set(HeaderAffinity, "response_id")
	if pool == s.slow {
		c.Set(HeaderPath, "slow")
	} else {
		c.Set(HeaderPath, "fast")
	}
	resp, err := pool.DoOn(dl.ctx, home.Replica, &upstream.ForwardRequest{Method: method, Path: path, Header: header})
	if err != nil {
		c.Set(HeaderReplica, home.Replica)
		return dl.err(homeUnavailable(err, id, "response_id", home))
	}
	defer resp.Body.Close()
	c.Set(HeaderReplica, resp.ReplicaID)
	b, err := readAnswer(c, resp, pool.Name())
	if err != nil {
		return dl.err(err)
	}
	if method == http.MethodDelete && resp.Status >= 200 && resp.Status < 300 {
		s.responses.Delete(id)
	}
	c.Status(resp.Status)
	copyResponseHeader(c, resp.Header)
	return c.Send(b)
}
