package server

import (
	"bytes"
	"errors"
	"net/http"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/triage-gw/triage/translate"
	"github.com/triage-gw/triage/upstream"
	"github.com/triage-gw/triage/upstream/policy"
)

// HeaderTranslated says that the request was translated to another API for the pool that
// served it: "chat" when a Messages request ran as a chat completion.
const HeaderTranslated = "x-router-translated"

// HeaderTokenCount says how /v1/messages/count_tokens counted: "replica" (the pool's own
// tokenizer) or "estimate" (bytes/4, for a pool without the Messages API).
const HeaderTokenCount = "x-router-token-count"

// errAnswerTooLong: a non-streamed answer to translate was over maxPrefetch.
var errAnswerTooLong = errors.New("answer longer than 1 MiB")

// messagesHeaders are the Anthropic client headers passed to a replica that speaks the
// Messages API (vLLM reads neither, but an Anthropic-compatible engine may); x-api-key, like
// Authorization, stays at the gateway.
var messagesHeaders = []string{"Anthropic-Version", "Anthropic-Beta"}

func messagesForwardedHeader(c *fiber.Ctx) (http.Header, error) {
	header, err := forwardedHeader(c)
	if err != nil {
		return nil, err
	}
	for _, k := range messagesHeaders {
		if v := c.Get(k); v != "" {
			if err := upstream.CheckHeader(k, v); err != nil {
				return nil, err
			}
			header.Set(k, strings.Clone(v))
		}
	}
	return header, nil
}

// handleMessages serves POST /v1/messages: classified, decided and admitted like a chat
// completion, then sent as is to a pool that speaks the Messages API, or translated to a
// chat completion (and its answer back, streamed or not) for one that does not.
func (s *Server) handleMessages(c *fiber.Ctx, rq *request) error {
	if err := requireJSON(c); err != nil {
		return err
	}
	body := bytes.Clone(c.Body())
	in, err := decodeMessages(body, s.lim, false)
	if err != nil {
		return err
	}
	s.m.notePasted(in.text)
	x, err := s.newExchange(c, rq, in.user, in.prompt, messagesForwardedHeader)
	if err != nil {
		return err
	}
	defer x.end()
	if err := x.route(s, in.model, in.text.input); err != nil {
		return err
	}
	native := x.r.Pool.Serves(upstream.APIMessages)
	path, fwd := "/v1/messages", body
	var treq translate.MessagesRequest
	if !native {
		if fwd, treq, err = translate.MessagesToChat(body, x.r.Pool.AskStreamUsage()); err != nil {
			return badRequest("invalid_body", "", "%v", err)
		}
		path = "/v1/chat/completions"
		c.Set(HeaderTranslated, "chat")
	}
	resp, err := x.forward(path, fwd)
	if err != nil {
		return err
	}
	eventStream := resp.Status == http.StatusOK && isEventStream(resp.Header.Get("Content-Type"))
	if in.stream && eventStream {
		x.dl.stopTimer() // from here the pool's stream-idle timeout bounds the stream
	}
	st := x.stream(s, resp)
	onBreak := func(err error) []byte {
		st.reported = true // errorResponse logs it
		return messagesErrorEvent(errorResponse(err, s.log))
	}
	switch {
	case native && eventStream:
		st.sse = newSSEFramer(resp.Body, onBreak)
		st.src = st.sse
		c.Status(resp.Status)
		copyResponseHeader(c, resp.Header)
	case native:
		b, err := readAnswer(c, resp, x.r.Pool.Name())
		if err != nil {
			resp.Body.Close()
			return x.dl.err(err)
		}
		c.Status(resp.Status)
		copyResponseHeader(c, resp.Header)
		x.sendAnswer(st, b)
		return nil
	case eventStream:
		ts := translate.NewStream(resp.Body, treq)
		ts.OnBreak = onBreak
		st.src = ts
		c.Status(http.StatusOK)
		copyResponseHeader(c, resp.Header)
	default:
		b, err := readAnswer(c, resp, x.r.Pool.Name())
		if err != nil {
			resp.Body.Close()
			return x.dl.err(err)
		}
		out := translate.ChatErrorToMessages(resp.Status, b)
		if resp.Status >= 200 && resp.Status < 300 {
			if out, err = translate.ChatToMessage(b, treq); err != nil {
				resp.Body.Close()
				return s.untranslatable(x.r.Pool.Name(), resp.ReplicaID, "message", err)
			}
		}
		c.Status(resp.Status)
		copyResponseHeader(c, resp.Header)
		c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
		x.sendAnswer(st, out)
		return nil
	}
	x.sendStream(st)
	return nil
}

// countTokens is the answer of /v1/messages/count_tokens.
type countTokens struct {
	InputTokens int `json:"input_tokens"`
}

// handleCountTokens serves POST /v1/messages/count_tokens: routed like the message it counts
// (tokenizers differ between pools), then answered by that pool's replica, or estimated
// (bytes/4) when the pool does not speak the Messages API.
func (s *Server) handleCountTokens(c *fiber.Ctx, rq *request) error {
	if err := requireJSON(c); err != nil {
		return err
	}
	body := bytes.Clone(c.Body())
	in, err := decodeMessages(body, s.lim, true)
	if err != nil {
		return err
	}
	s.m.notePasted(in.text)
	header, err := messagesForwardedHeader(c)
	if err != nil {
		return err
	}
	dl := s.newDeadline()
	defer dl.end()
	r, err := s.routeModel(dl.ctx, rq, in.model, in.text.input)
	if err != nil {
		return dl.err(err)
	}
	defer r.Release()
	setRouteHeaders(c, rq, &r)
	if !r.Pool.Serves(upstream.APIMessages) {
		c.Set(HeaderTokenCount, "estimate")
		return sendJSON(c, http.StatusOK, countTokens{InputTokens: max(1, len(in.prompt)/4)})
	}
	resp, err := r.Pool.Do(dl.ctx, &upstream.ForwardRequest{
		Method: http.MethodPost, Path: "/v1/messages/count_tokens", Header: header, Body: body, SetModel: true,
		Routing: policy.Request{Prompt: in.prompt, InputTokens: len(in.prompt) / 4},
	})
	if err != nil {
		if id := failedReplica(err); id != "" {
			c.Set(HeaderReplica, id)
		}
		return dl.err(err)
	}
	defer resp.Body.Close()
	c.Set(HeaderReplica, resp.ReplicaID)
	c.Set(HeaderTokenCount, "replica")
	b, err := readAnswer(c, resp, r.Pool.Name())
	if err != nil {
		return dl.err(err)
	}
	c.Status(resp.Status)
	copyResponseHeader(c, resp.Header)
	return c.Send(b)
}

// untranslatable is the 502 for a replica's chat answer that could not be turned into the
// client's API (what: "message", "response"); the reason goes to the log, not the client.
func (s *Server) untranslatable(pool, replica, what string, err error) error {
	s.log.Warn("untranslatable chat answer", "pool", pool, "replica", replica, "err", err)
	return &apiError{status: http.StatusBadGateway, typ: typeUpstream, code: "upstream_invalid_answer",
		message: "upstream " + pool + "/" + replica + ": the chat answer could not be translated to a " + what}
}
