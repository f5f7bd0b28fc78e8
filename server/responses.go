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

	"github.com/triage-gw/triage/router"
	"github.com/triage-gw/triage/translate"
	"github.com/triage-gw/triage/upstream"
	"github.com/triage-gw/triage/upstream/policy"
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
	user := routingKey(in.user)
	session := routingKey(strings.Clone(c.Get(HeaderSession)))
	if session == "" {
		session = user
	}
	header, err := forwardedHeader(c)
	if err != nil {
		return err
	}
	target, err := sloTarget(c)
	if err != nil {
		return err
	}
	var home responseHome
	if in.previous != "" {
		var ok bool
		if home, ok = s.responses.Get(c.UserContext(), in.previous); !ok || s.poolNamed(home.Pool) == nil {
			return responseNotFound(in.previous, "previous_response_id")
		}
	}

	dl := s.newDeadline()
	handedOff := false
	defer func() {
		if !handedOff {
			dl.end()
		}
	}()
	var r router.Route
	if in.previous != "" {
		pool := s.poolNamed(home.Pool)
		if r, err = s.router.Pin(pool == s.slow); err != nil {
			return dl.err(err)
		}
		s.m.routerLatency.Observe(r.Decided.Sub(rq.arrival).Seconds())
	} else if r, err = s.routeModel(dl.ctx, rq, in.model, in.text.input); err != nil {
		return dl.err(err)
	}
	defer func() {
		if !handedOff {
			r.Release()
		}
	}()
	setRouteHeaders(c, rq, &r)
	// A continuation's pool stored its previous response, so it speaks the API: a translated
	// response is never recorded.
	native := in.previous != "" || r.Pool.Serves(upstream.APIResponses)
	path, fwd := "/v1/responses", body
	var treq translate.ResponsesRequest
	if !native {
		if fwd, treq, err = translate.ResponsesToChat(body, r.Pool.AskStreamUsage()); err != nil {
			if u, ok := errors.AsType[*translate.Untranslatable](err); ok {
				return &apiError{status: http.StatusBadRequest, typ: typeInvalidRequest, code: "api_not_supported", param: u.Param,
					message: fmt.Sprintf("%s: the request was routed to pool %s, whose replicas do not serve the Responses API (pools.%s.apis), so it is translated to chat completions, where this field has no form",
						u.Error(), r.Pool.Name(), r.Pool.Name())}
			}
			return badRequest("invalid_body", "", "%v", err)
		}
		path = "/v1/chat/completions"
		c.Set(HeaderTranslated, "chat")
	}
	fr := &upstream.ForwardRequest{
		Method:   http.MethodPost,
		Path:     path,
		Header:   header,
		Body:     fwd,
		SetModel: true,
		Routing:  policy.Request{Prompt: in.prompt, InputTokens: len(in.prompt) / 4, User: user, Session: session, TTFTTarget: target},
	}
	var resp *upstream.Response
	// As in proxy: until the handler returns, a client that leaves cancels the upstream request.
	dl.watchClient(c.Context().Conn())
	defer dl.unwatchClient()
	if in.previous != "" {
		c.Set(HeaderAffinity, "previous_response_id")
		resp, err = r.Pool.DoOn(dl.ctx, home.Replica, fr)
		if err != nil {
			c.Set(HeaderReplica, home.Replica) // whatever the failure, the one replica it could go to
		}
		err = homeUnavailable(err, in.previous, "previous_response_id", home)
	} else {
		resp, err = r.Pool.Do(dl.ctx, fr)
	}
	if err != nil {
		if id := failedReplica(err); id != "" {
			c.Set(HeaderReplica, id)
		}
		return dl.err(err)
	}
	c.Set(HeaderReplica, resp.ReplicaID)
	at := responseHome{Pool: r.Pool.Name(), Replica: resp.ReplicaID}
	st := s.newStream(c, rq, dl, &r, resp)
	eventStream := resp.Status == http.StatusOK && isEventStream(resp.Header.Get("Content-Type"))
	if !native {
		return s.sendTranslatedResponse(c, rq, dl, &r, resp, st, treq, eventStream, in.stream, &handedOff)
	}
	if eventStream {
		if in.stream {
			dl.stopTimer()
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
		b, err := readAnswer(c, resp, r.Pool.Name())
		if err != nil {
			resp.Body.Close()
			return dl.err(err)
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
		handedOff = true
		sendAnswer(c, rq, st, b)
		return nil
	}
	c.Status(resp.Status)
	copyResponseHeader(c, resp.Header)
	handedOff = true
	sendStream(c, rq, st)
	return nil
}

// sendTranslatedResponse answers a Responses request that went to a chat-only pool as a chat
// completion: the chat answer translated back (translate.ChatToResponse, or a
// translate.ResponsesStream for a stream), a chat error passed on as it is (both APIs share
// the OpenAI error shape). Nothing is recorded for affinity: the replica stored nothing.
func (s *Server) sendTranslatedResponse(c *fiber.Ctx, rq *request, dl *deadline, r *router.Route, resp *upstream.Response,
	st *stream, treq translate.ResponsesRequest, eventStream, streamed bool, handedOff *bool) error {
	if eventStream {
		if streamed {
			dl.stopTimer() // from here the pool's stream-idle timeout bounds the stream
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
		b, err := readAnswer(c, resp, r.Pool.Name())
		if err != nil {
			resp.Body.Close()
			return dl.err(err)
		}
		if resp.Status >= 200 && resp.Status < 300 {
			if b, err = translate.ChatToResponse(b, treq); err != nil {
				resp.Body.Close()
				return s.untranslatable(r.Pool.Name(), resp.ReplicaID, "response", err)
			}
		}
		c.Status(resp.Status)
		copyResponseHeader(c, resp.Header)
		c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
		*handedOff = true
		sendAnswer(c, rq, st, b)
		return nil
	}
	*handedOff = true
	sendStream(c, rq, st)
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
