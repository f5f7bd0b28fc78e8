package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/valyala/fasthttp"
)

// request is one handler invocation's bookkeeping.
type request struct {
	arrival time.Time
	// deferred: a streamed body will call finish when it ends; the handler must not.
	deferred bool
	finish   func() // idempotent
}

type handlerFunc func(c *fiber.Ctx, rq *request) error

// newApp builds the fiber app and its routes. Admin routes exist only with a token.
func (s *Server) newApp() *fiber.App {
	sc := s.cfg.HTTP
	app := fiber.New(fiber.Config{
		AppName:        "triage",
		BodyLimit:      sc.BodyLimit,
		ReadTimeout:    sc.ReadTimeout,
		WriteTimeout:   sc.WriteTimeout,
		IdleTimeout:    sc.IdleTimeout,
		ReadBufferSize: 16 << 10, // request headers; larger ones get 431
		// Bodies are read by readBody as they arrive, not allocated at their declared length.
		StreamRequestBody: true,
		// Idle keep-alive connections give their read and write buffers back.
		ReduceMemoryUsage:     true,
		DisableStartupMessage: true,
		ErrorHandler:          s.handleFiberError,
	})
	app.Post("/v1/query-process", s.clientEndpoint("query_process", s.handleQueryProcess))
	app.Post("/v1/classify", s.clientEndpoint("classify", s.handleClassify))
	app.Post("/v1/chat/completions", s.clientEndpoint("chat_completions", s.handleChat))
	app.Post("/v1/completions", s.clientEndpoint("completions", s.handleCompletions))
	app.Get("/v1/models", s.clientEndpoint("models", s.handleModels))
	app.Post("/v1/messages", s.wrap("messages", s.auth != nil, shapeMessages, s.handleMessages))
	app.Post("/v1/messages/count_tokens", s.wrap("messages_count_tokens", s.auth != nil, shapeMessages, s.handleCountTokens))
	app.Post("/v1/responses", s.clientEndpoint("responses", s.handleResponses))
	app.Get("/v1/responses/:id", s.clientEndpoint("responses_get", s.handleResponseByID))
	app.Delete("/v1/responses/:id", s.clientEndpoint("responses_delete", s.handleResponseByID))
	app.Get("/healthz", s.endpoint("healthz", s.handleHealthz))
	// vLLM's and most OpenAI-compatible servers' liveness route, which benchmark clients and
	// orchestrators probe.
	app.Get("/health", s.endpoint("health", s.handleHealthz))
	app.Get("/readyz", s.endpoint("readyz", s.handleReadyz))
	metricsHandler := adaptor.HTTPHandler(promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
	app.Get("/metrics", s.endpoint("metrics", func(c *fiber.Ctx, _ *request) error { return metricsHandler(c) }))
	if s.cfg.Admin.Token != "" {
		app.Post("/admin/reload", s.endpoint("admin_reload", s.admin(s.handleReload)))
		app.Post("/admin/drain", s.endpoint("admin_drain", s.admin(s.handleDrain)))
		app.Post("/admin/undrain", s.endpoint("admin_undrain", s.admin(s.handleUndrain)))
		app.Get("/admin/status", s.endpoint("admin_status", s.admin(s.handleStatus)))
		app.Get("/admin/trace", s.endpoint("admin_trace", s.admin(s.handleTrace)))
	}

	// fiber answers a method it does not know with a plain-text 400 before any route or
	// error handler runs; answer it here in the same JSON shape as everything else.
	inner := app.Server().Handler
	app.Server().Handler = func(ctx *fasthttp.RequestCtx) {
		defer s.finishBody(ctx)
		if !knownMethod(ctx.Method()) {
			s.rejectMethod(ctx)
			return
		}
		inner(ctx)
	}
	return app
}

// clipPath bounds a request path repeated in an error message.
func clipPath(p string) string {
	if len(p) <= maxQuoted {
		return p
	}
	return truncName(p)
}

func knownMethod(m []byte) bool {
	switch string(m) {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete,
		http.MethodConnect, http.MethodOptions, http.MethodTrace, http.MethodPatch:
		return true
	}
	return false
}

func (s *Server) rejectMethod(ctx *fasthttp.RequestCtx) {
	e := &apiError{status: http.StatusMethodNotAllowed, typ: typeInvalidRequest, code: "method_not_allowed",
		message: fmt.Sprintf("method %s is not supported", clip(string(ctx.Method())))}
	b, _ := json.Marshal(e.body())
	ctx.SetStatusCode(e.status)
	ctx.SetContentType(fiber.MIMEApplicationJSON)
	ctx.SetBody(b)
	s.m.requests.WithLabelValues("none", strconv.Itoa(e.status)).Inc()
}

// endpoint wraps a handler with the request bookkeeping every endpoint shares: in-flight
// accounting (which a streamed body takes over), panic recovery, reading the body, the error
// answer and the requests metric.
func (s *Server) endpoint(name string, h handlerFunc) fiber.Handler {
	return s.wrap(name, false, shapeOpenAI, h)
}

// clientEndpoint is endpoint for the /v1/ endpoints, which need an API key when
// auth.keys_file is set: the key is checked before the body is read (an unauthenticated
// client makes the gateway buffer nothing) and its token bucket charged after.
func (s *Server) clientEndpoint(name string, h handlerFunc) fiber.Handler {
	return s.wrap(name, s.auth != nil, shapeOpenAI, h)
}

// wrap is the bookkeeping of endpoint and clientEndpoint; shape is the shape of the
// endpoint's error bodies.
func (s *Server) wrap(name string, keyed bool, shape errorShape, h handlerFunc) fiber.Handler {
	return func(c *fiber.Ctx) error {
		rq := &request{arrival: time.Now()}
		s.active.add()
		s.m.inflight.Inc()
		rq.finish = sync.OnceFunc(func() {
			s.m.inflight.Dec()
			s.active.done()
		})
		var err error
		func() {
			defer func() {
				if p := recover(); p != nil {
					s.log.Error("handler panicked", "endpoint", name, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
					err = fmt.Errorf("handler panicked: %v", p)
				}
			}()
			var key *apiKey
			if keyed {
				if key, err = s.auth.authenticate(c); err != nil {
					c.Set(fiber.HeaderWWWAuthenticate, `Bearer realm="triage"`)
					return
				}
			}
			if err = s.readBody(c); err != nil {
				return
			}
			if key != nil {
				if err = s.auth.admit(key, len(c.Body())); err != nil {
					return
				}
			}
			err = h(c, rq)
		}()
		if err != nil {
			s.writeErrorAs(c, err, shape)
		}
		s.m.requests.WithLabelValues(name, strconv.Itoa(c.Response().StatusCode())).Inc()
		if !rq.deferred || err != nil {
			rq.finish()
		}
		return nil
	}
}

// writeError answers with err's status and OpenAI-shaped body (see errorResponse), or
// Messages-shaped on the Messages endpoints (fiber's own 404 and 405 there).
func (s *Server) writeError(c *fiber.Ctx, err error) {
	s.writeErrorAs(c, err, shapeOf(c.Path()))
}

func (s *Server) writeErrorAs(c *fiber.Ctx, err error, shape errorShape) {
	ae := errorResponse(err, s.log)
	if shape == shapeMessages {
		s.writeMessagesError(c, ae)
		return
	}
	b, merr := json.Marshal(ae.body())
	if merr != nil { // strings always marshal
		b = []byte(`{"error":{"message":"internal error","type":"server_error","param":null,"code":null}}`)
	}
	if ae.retryAfter != "" {
		c.Set(fiber.HeaderRetryAfter, ae.retryAfter)
	}
	c.Status(ae.status)
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	c.Response().SetBody(b)
	if ae.status == statusClientClosedRequest {
		// The socket has seen its end of file or reset: nothing more comes on it.
		c.Context().SetConnectionClose()
	}
}

// handleFiberError answers what fiber raises before a handler runs: no route (404), wrong
// method (405), body over the limit (413), unreadable request (400, 408, 431).
func (s *Server) handleFiberError(c *fiber.Ctx, err error) error {
	var fe *fiber.Error
	if errors.As(err, &fe) {
		switch fe.Code {
		case http.StatusNotFound:
			err = &apiError{status: fe.Code, typ: typeInvalidRequest, code: "not_found",
				message: fmt.Sprintf("no route for %s %s", c.Method(), clipPath(c.Path()))}
		case http.StatusMethodNotAllowed:
			allow := string(c.Response().Header.Peek(fiber.HeaderAllow))
			err = &apiError{status: fe.Code, typ: typeInvalidRequest, code: "method_not_allowed",
				message: fmt.Sprintf("method %s not allowed on %s (allowed: %s)", c.Method(), clipPath(c.Path()), allow)}
		}
	}
	s.writeError(c, err)
	s.m.requests.WithLabelValues("none", strconv.Itoa(c.Response().StatusCode())).Inc()
	return nil
}

// requireJSON refuses a body declared as anything but JSON with 415. A missing Content-Type
// is accepted as JSON. Compressed bodies are refused too: fiber would inflate them without
// any bound, past server.body_limit.
func requireJSON(c *fiber.Ctx) error {
	if ce := string(c.Request().Header.Peek(fiber.HeaderContentEncoding)); ce != "" && !strings.EqualFold(ce, "identity") {
		return &apiError{status: http.StatusUnsupportedMediaType, typ: typeInvalidRequest, code: "unsupported_media_type",
			message: fmt.Sprintf("Content-Encoding %s is not supported; send the body uncompressed", clip(ce))}
	}
	ct := string(c.Request().Header.ContentType())
	if ct == "" {
		return nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil && (mt == fiber.MIMEApplicationJSON || strings.HasSuffix(mt, "+json")) {
		return nil
	}
	return &apiError{status: http.StatusUnsupportedMediaType, typ: typeInvalidRequest, code: "unsupported_media_type",
		message: fmt.Sprintf("Content-Type must be application/json, got %s", clip(ct))}
}

// sendJSON answers 200 with v as JSON.
func sendJSON(c *fiber.Ctx, status int, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode response: %w", err)
	}
	c.Status(status)
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Send(b)
}
