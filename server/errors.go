package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"

	"github.com/gofiber/fiber/v2"

	"github.com/triage-gw/triage/router"
	"github.com/triage-gw/triage/upstream"
)

// OpenAI error types used in error bodies.
const (
	typeInvalidRequest = "invalid_request_error"
	typeRateLimit      = "rate_limit_error"
	typeAuthentication = "authentication_error"
	typeServer         = "server_error"
	typeUnavailable    = "service_unavailable"
	typeTimeout        = "timeout_error"
	typeUpstream       = "upstream_error"
)

// apiError is a complete error answer: status, OpenAI-shaped body and, for 429 and 503, a
// Retry-After value. Handlers return one for input problems; everything else is turned into
// one by errorResponse.
type apiError struct {
	status     int
	typ        string
	code       string // "" is written as null
	param      string // "" is written as null
	message    string
	retryAfter string // seconds; "" sends no Retry-After
}

func (e *apiError) Error() string { return e.message }

// badRequest is a 400 naming the offending parameter.
func badRequest(code, param, format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, typ: typeInvalidRequest, code: code, param: param,
		message: fmt.Sprintf(format, args...)}
}

// errorBody is the OpenAI error shape: {"error":{"message","type","param","code"}}.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func (e *apiError) body() errorBody {
	d := errorDetail{Message: e.message, Type: e.typ}
	if e.param != "" {
		d.Param = &e.param
	}
	if e.code != "" {
		d.Code = &e.code
	}
	return errorBody{Error: d}
}

// Errors of the server itself, mapped by errorResponse.
var (
	// errShuttingDown: the gateway is draining and takes no new work.
	errShuttingDown = errors.New("server is shutting down")
	// errRequestTimeout: server.request_timeout ran out. It wraps context.DeadlineExceeded so
	// it maps like any deadline.
	errRequestTimeout = fmt.Errorf("request exceeded server.request_timeout: %w", context.DeadlineExceeded)
)

// upstreamStatusError is a non-2xx answer of the pool to the query-process execution, which
// cannot be passed through because that endpoint's body is fixed.
type upstreamStatusError struct {
	pool       string
	replica    string
	status     int
	retryAfter string
}

func (e *upstreamStatusError) Error() string {
	return fmt.Sprintf("execution on pool %s (replica %s) answered status %d", e.pool, e.replica, e.status)
}

// errorResponse is the one place where errors become HTTP answers:
//
//	*apiError                                  as built (input errors: 400, 401, 404, 413, 415, ...)
//	*fiber.Error (router, body limit)          its status, OpenAI-shaped
//	a request fasthttp cannot parse            400 invalid_header / incomplete_body, the raw
//	                                           request fasthttp appends cut (parseError)
//	over server.max_connections                503, Retry-After: 1 (written by connListener)
//	over server.max_connections_per_ip         429, Retry-After: 1 (written by connListener)
//	router.ErrQueueFull                        429, Retry-After: 1
//	router.ErrBudgetExceeded                   429, Retry-After: 1 (routing.fallback: reject)
//	router.ErrSlowSaturated                    429, Retry-After: 1 (a request pinned to slow)
//	upstream.ErrRejected                       429, Retry-After: 1
//	upstream.ErrNoHealthyReplica               503
//	upstream.ErrUpstreamTimeout, deadline      504
//	errClientGone                              499 client_closed_request (nobody reads it)
//	router.ErrClosed, shutting down, no model  503 (context.Canceled: cut by shutdown)
//	*router.UnclassifiableError                400 unclassifiable_text
//	router.ErrNoText                           400 no_text (routing.fallback: reject)
//	*upstream.UpstreamError                    502 naming pool, replica id and the kind of failure
//	                                           (never the replica's address; logged in full)
//	non-2xx execution of query-process         429 for 429 (Retry-After passed on), else 502
//	*upstream.HeaderError                      400 invalid_header, param = the header's name
//	upstream.ErrInvalidRequest                 400 (a request no replica could be sent)
//	upstream.ErrInvalidBody                    400
//	upstream.ErrUnknownReplica                 404
//	*router.ReloadError                        500 (logged by Reload)
//	anything else                              500, logged here once
func errorResponse(err error, log *slog.Logger) *apiError {
	var (
		ae  *apiError
		fe  *fiber.Error
		ue  *upstream.UpstreamError
		se  *upstreamStatusError
		he  *upstream.HeaderError
		uce *router.UnclassifiableError
		rle *router.ReloadError
	)
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &fe):
		return fiberError(fe)
	case errors.As(err, &uce):
		return badRequest("unclassifiable_text", "", "%v", uce)
	case errors.Is(err, router.ErrNoText):
		return badRequest("no_text", "", "%v; name a model to pin it to a pool", err)
	case errors.Is(err, errTooManyConnections):
		return &apiError{status: http.StatusServiceUnavailable, typ: typeUnavailable, code: "too_many_connections",
			message: err.Error(), retryAfter: "1"}
	case errors.Is(err, errTooManyConnectionsPerIP):
		return &apiError{status: http.StatusTooManyRequests, typ: typeRateLimit, code: "too_many_connections_per_ip",
			message: err.Error(), retryAfter: "1"}
	case errors.Is(err, router.ErrQueueFull):
		return &apiError{status: http.StatusTooManyRequests, typ: typeRateLimit, code: "classifier_queue_full",
			message: "the classifier queue is full; retry shortly", retryAfter: "1"}
	case errors.Is(err, router.ErrBudgetExceeded):
		return &apiError{status: http.StatusTooManyRequests, typ: typeRateLimit, code: "classifier_timeout",
			message: err.Error() + "; retry shortly", retryAfter: "1"}
	case errors.Is(err, router.ErrSlowSaturated):
		return &apiError{status: http.StatusTooManyRequests, typ: typeRateLimit, code: "slow_saturated",
			message: "the request names the slow pool's model and " + err.Error() + "; retry shortly", retryAfter: "1"}
	case errors.Is(err, upstream.ErrRejected):
		return &apiError{status: http.StatusTooManyRequests, typ: typeRateLimit, code: "admission_rejected",
			message: err.Error(), retryAfter: "1"}
	case errors.Is(err, upstream.ErrNoHealthyReplica):
		return &apiError{status: http.StatusServiceUnavailable, typ: typeUnavailable, code: "no_healthy_replica",
			message: err.Error(), retryAfter: "1"}
	case errors.As(err, &ue) && errors.Is(err, upstream.ErrUpstreamTimeout):
		log.Warn("upstream timed out", "pool", ue.Pool, "replica", ue.Replica, "err", err)
		return &apiError{status: http.StatusGatewayTimeout, typ: typeTimeout, code: "timeout",
			message: fmt.Sprintf("upstream %s/%s: no response in time", ue.Pool, ue.Replica)}
	case errors.Is(err, upstream.ErrUpstreamTimeout), errors.Is(err, context.DeadlineExceeded):
		return &apiError{status: http.StatusGatewayTimeout, typ: typeTimeout, code: "timeout", message: err.Error()}
	case errors.Is(err, errClientGone):
		return &apiError{status: statusClientClosedRequest, typ: typeInvalidRequest, code: "client_closed_request",
			message: err.Error()}
	case errors.Is(err, router.ErrClosed), errors.Is(err, errShuttingDown), errors.Is(err, context.Canceled):
		// A request's context is cancelled only by the hard stop at the end of the drain
		// (timeouts are mapped above): it is the shutdown that failed it.
		return &apiError{status: http.StatusServiceUnavailable, typ: typeUnavailable, code: "shutting_down",
			message: errShuttingDown.Error()}
	case errors.Is(err, router.ErrNoModel):
		return &apiError{status: http.StatusServiceUnavailable, typ: typeUnavailable, code: "no_model",
			message: err.Error()}
	case errors.As(err, &ue):
		// The transport's own text names the replica's URL; the client gets the pool, the
		// replica id and the kind of failure, the log gets everything.
		log.Warn("upstream failed", "pool", ue.Pool, "replica", ue.Replica, "err", err)
		return &apiError{status: http.StatusBadGateway, typ: typeUpstream, code: "upstream_error",
			message: fmt.Sprintf("upstream %s/%s: %s", ue.Pool, ue.Replica, failureKind(ue.Err))}
	case errors.As(err, &se):
		if se.status == http.StatusTooManyRequests {
			ra := se.retryAfter
			if ra == "" {
				ra = "1"
			}
			return &apiError{status: http.StatusTooManyRequests, typ: typeRateLimit, code: "upstream_busy",
				message: se.Error(), retryAfter: ra}
		}
		return &apiError{status: http.StatusBadGateway, typ: typeUpstream, code: "upstream_status", message: se.Error()}
	case errors.As(err, &he):
		return badRequest("invalid_header", he.Name, "%v", he)
	case errors.Is(err, upstream.ErrInvalidRequest):
		return badRequest("invalid_request", "", "%v", err)
	case errors.Is(err, upstream.ErrInvalidBody):
		return badRequest("invalid_body", "", "%v", err)
	case errors.Is(err, upstream.ErrUnknownReplica):
		return &apiError{status: http.StatusNotFound, typ: typeInvalidRequest, code: "unknown_replica", param: "replica",
			message: err.Error()}
	case errors.As(err, &rle):
		return &apiError{status: http.StatusInternalServerError, typ: typeServer, code: "model_reload_failed",
			message: rle.Error()}
	}
	log.Error("internal error", "err", err)
	return &apiError{status: http.StatusInternalServerError, typ: typeServer, code: "internal_error",
		message: "internal error"}
}

// failureKind names an upstream failure without the details that carry addresses.
func failureKind(err error) string {
	var tlsErr *tls.CertificateVerificationError
	var recErr tls.RecordHeaderError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return "connection reset"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed before the response ended"
	case errors.As(err, &tlsErr), errors.As(err, &recErr):
		return "TLS handshake failed"
	case errors.Is(err, context.DeadlineExceeded), os.IsTimeout(err):
		return "timed out"
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return "host not found"
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		return "could not connect"
	}
	return "the request failed"
}

// parseError names a request fasthttp could not parse. Its text ends with the raw request
// ("buffer size=N, contents: ...") — every header the client sent, credentials included — which
// is cut: the client is told which value was refused, never sent its request back, and a
// proxy or log in between never stores it.
func parseError(msg string) (code, message string) {
	msg, _, _ = strings.Cut(msg, ": buffer size=")
	msg, _, _ = strings.Cut(msg, "; buffer size=")
	if rest, ok := strings.CutPrefix(msg, "error when reading request headers: "); ok {
		return "invalid_header", "the request headers could not be parsed: " + rest
	}
	if rest, ok := strings.CutPrefix(msg, "error when reading request body: "); ok {
		return "incomplete_body", "the request body could not be read: " + rest
	}
	return "invalid_request", msg
}

// fiberError turns errors raised by fiber itself (no route, wrong method, body too large,
// malformed request) into OpenAI-shaped ones.
func fiberError(fe *fiber.Error) *apiError {
	e := &apiError{status: fe.Code, typ: typeInvalidRequest, message: fe.Message}
	switch fe.Code {
	case http.StatusBadRequest:
		e.code, e.message = parseError(fe.Message)
	case http.StatusNotFound:
		e.code = "not_found"
	case http.StatusMethodNotAllowed:
		e.code = "method_not_allowed"
	case http.StatusRequestEntityTooLarge:
		e.code = "body_too_large"
		e.message = "request body is larger than server.body_limit"
	case http.StatusRequestHeaderFieldsTooLarge:
		e.code = "headers_too_large"
	case http.StatusRequestTimeout:
		e.code = "request_timeout"
	}
	if fe.Code >= 500 {
		e.typ = typeServer
	}
	return e
}
