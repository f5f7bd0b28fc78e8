package server

import (
	"net/http"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/triage-gw/triage/translate"
)

// errorShape is the body shape of an endpoint's errors: each API answers in its own, so its
// clients raise the right exception with the message.
type errorShape int

const (
	shapeOpenAI   errorShape = iota // {"error":{"message","type","param","code"}}
	shapeMessages                   // Anthropic: {"type":"error","error":{"type","message"}}
)

// shapeOf is the error shape of a request path.
func shapeOf(path string) errorShape {
	if path == "/v1/messages" || strings.HasPrefix(path, "/v1/messages/") {
		return shapeMessages
	}
	return shapeOpenAI
}

// StatusOverloaded is Anthropic's status for an API that is overloaded, which its clients
// retry; a Messages request the gateway cannot place (no healthy replica, too many
// connections, shutting down: 503 for the other APIs) gets it.
const StatusOverloaded = 529

// messagesError is ae in the Messages shape: the status (503 becomes 529) and the error type
// of that status. The message names the field for input errors, as in the OpenAI shape.
func messagesError(ae *apiError) (int, []byte) {
	status := ae.status
	if status == http.StatusServiceUnavailable {
		status = StatusOverloaded
	}
	msg := ae.message
	if ae.param != "" && !strings.Contains(msg, ae.param) {
		msg = ae.param + ": " + msg
	}
	return status, translate.ErrorBody(translate.ErrorType(status), msg)
}

// writeMessagesError answers ae in the Messages shape.
func (s *Server) writeMessagesError(c *fiber.Ctx, ae *apiError) {
	status, b := messagesError(ae)
	if ae.retryAfter != "" {
		c.Set(fiber.HeaderRetryAfter, ae.retryAfter)
	}
	c.Status(status)
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	c.Response().SetBody(b)
}

// messagesErrorEvent ends a Messages stream the replica broke off: Anthropic's error event.
func messagesErrorEvent(ae *apiError) []byte {
	_, b := messagesError(ae)
	out := make([]byte, 0, len(b)+24)
	out = append(out, "event: error\ndata: "...)
	out = append(out, b...)
	return append(out, "\n\n"...)
}
