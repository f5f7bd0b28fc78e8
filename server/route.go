package server

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/triage-gw/triage/router"
)

// Decision headers set on every routed response.
const (
	HeaderPath      = "x-router-path"
	HeaderReason    = "x-router-reason"
	HeaderPSlow     = "x-router-p-slow"
	HeaderThreshold = "x-router-threshold"
	HeaderCache     = "x-router-cache"
	HeaderReplica   = "x-router-replica"
	HeaderLatency   = "x-router-latency"
	HeaderStage     = "x-router-stage"
	// HeaderInBand, on a route decided on the cascade's first-stage score inside its band
	// because the encoder failed the request (router.Route.InBandAfter), names that failure:
	// classifier_timeout, classifier_busy or classifier_unavailable.
	HeaderInBand = "x-router-in-band"
	// HeaderPromptTokens and HeaderCompletionTokens are the replica's usage of a
	// non-streaming answer: the tokens the gateway counted for it. A stream's headers go
	// before its usage exists, so streams have neither.
	HeaderPromptTokens     = "x-router-prompt-tokens"
	HeaderCompletionTokens = "x-router-completion-tokens"
	HeaderSession          = "x-session-id"
	// HeaderPredictedCached is upstream.Response.PredictedCachedTokens: the leading prompt
	// tokens the replica's engine had reported stored (KV-cache events) when it was picked;
	// absent when the gateway had no such report. HeaderPendingCached is
	// PendingCachedTokens: the further tokens the policy counted as held there because
	// earlier picks had just sent them (not yet confirmed by the engine).
	HeaderPredictedCached = "x-router-predicted-cached-tokens"
	HeaderPendingCached   = "x-router-pending-cached-tokens"
)

// route asks the router for a decision on a request that will be executed (a slow verdict
// holds a slot until the caller's Release) and records the router latency: arrival to
// decision, the x-router-latency header.
//
// A request without text (text "": a user turn of images or files alone, see newTextInput's
// callers) is not classified: routing.fallback places it (router.RouteNoText).
func (s *Server) route(ctx context.Context, rq *request, text string) (router.Route, error) {
	var (
		r   router.Route
		err error
	)
	if text == "" {
		r, err = s.router.RouteNoText()
	} else {
		r, err = s.router.Route(ctx, text)
	}
	if err != nil {
		return router.Route{}, err
	}
	s.m.routerLatency.Observe(r.Decided.Sub(rq.arrival).Seconds())
	return r, nil
}

// routeModel routes an OpenAI request by the model it names: an alias of the routed model
// (or no model, or an unknown one under routing.unknown_model: route) is classified and
// decided; a model one pool serves pins the request there unclassified; an unknown one under
// unknown_model: reject is OpenAI's 404 model_not_found.
func (s *Server) routeModel(ctx context.Context, rq *request, model, text string) (router.Route, error) {
	switch s.router.Target(model) {
	case router.TargetFast, router.TargetSlow:
		r, err := s.router.Pin(s.router.Target(model) == router.TargetSlow)
		if err != nil {
			return router.Route{}, err
		}
		s.m.routerLatency.Observe(r.Decided.Sub(rq.arrival).Seconds())
		return r, nil
	case router.TargetUnknown:
		return router.Route{}, &apiError{status: http.StatusNotFound, typ: typeInvalidRequest, code: "model_not_found", param: "model",
			message: fmt.Sprintf("The model %s does not exist or you do not have access to it. GET /v1/models lists the models, and %s routes.",
				clip(model), clip(s.router.Aliases()[0]))}
	}
	return s.route(ctx, rq, text)
}

// setRouteHeaders writes the decision headers and Server-Timing. A route decided without a
// score (pinned, or a classifier fallback) has no P(slow), threshold, cache or stage to
// report, so those headers are left out.
func setRouteHeaders(c *fiber.Ctx, rq *request, r *router.Route) {
	c.Set(HeaderPath, r.Path())
	c.Set(HeaderReason, string(r.Reason))
	c.Set(HeaderLatency, millis(r.Decided.Sub(rq.arrival)))
	if !r.Classified() {
		return
	}
	c.Set(HeaderPSlow, strconv.FormatFloat(float64(r.PSlow), 'f', 4, 32))
	c.Set(HeaderThreshold, strconv.FormatFloat(r.Decision.Threshold, 'f', 4, 64))
	c.Set(HeaderCache, r.CacheResult())
	c.Set(HeaderStage, r.Stage.String())
	if r.InBandAfter != "" {
		c.Set(HeaderInBand, string(r.InBandAfter))
	}
	setServerTiming(c, r)
}

// setServerTiming writes the standard Server-Timing header: cache lookup ("hit", "miss", or
// "hit-shared" for a hit in the fleet's shared tier), the cascade's first stage, batcher
// queue, encoder inference and decision, in milliseconds; the stage entry names the stage
// whose P(slow) was used.
func setServerTiming(c *fiber.Ctx, r *router.Route) {
	desc := r.CacheResult()
	if r.Shared {
		desc = "hit-shared"
	}
	// Appended into one buffer: fmt.Sprintf and five strings took 6 µs of a cache hit's
	// 90 in the handler (BenchmarkProxyChatHit's profile). fasthttp copies the value.
	var arr [224]byte
	b := append(arr[:0], `cache;desc="`...)
	b = append(b, desc...)
	for _, e := range []struct {
		name string
		d    time.Duration
	}{{`";dur=`, r.CacheTime}, {`, static;dur=`, r.Static}, {`, queue;dur=`, r.Queue},
		{`, inference;dur=`, r.Inference}, {`, decision;dur=`, r.DecideTime}} {
		b = appendMillis(append(b, e.name...), e.d)
	}
	b = append(append(append(b, `, stage;desc="`...), r.Stage.String()...), '"')
	c.Response().Header.SetBytesV(fiber.HeaderServerTiming, b)
}

// millis formats d in milliseconds with microsecond precision ("0.734").
func millis(d time.Duration) string {
	return string(appendMillis(nil, d))
}

// appendMillis appends millis(d) to b.
func appendMillis(b []byte, d time.Duration) []byte {
	return strconv.AppendFloat(b, float64(d)/float64(time.Millisecond), 'f', 3, 64)
}

// deadline bounds one request by server.request_timeout. Unlike context.WithTimeout its timer
// can be stopped once a stream's headers are out, after which the stream is bounded by the
// pool's stream-idle timeout instead; its context parents the upstream request, so it must
// outlive the handler for streamed bodies.
type deadline struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	timer  *time.Timer

	gone  *goneWatcher
	watch *watch // set between watchClient and unwatchClient; nil when the conn cannot be watched
}

func (s *Server) newDeadline() *deadline {
	ctx, cancel := context.WithCancelCause(s.base)
	d := &deadline{ctx: ctx, cancel: cancel, gone: s.gone}
	d.timer = time.AfterFunc(s.cfg.HTTP.RequestTimeout, func() { cancel(errRequestTimeout) })
	return d
}

// stopTimer lifts the request timeout; end still has to be called.
func (d *deadline) stopTimer() { d.timer.Stop() }

// watchClient has the context cancelled (cause errClientGone) if the client behind conn
// closes or resets it before unwatchClient; call it just before the request goes upstream,
// and unwatchClient before the handler returns (fasthttp reads and writes the connection
// again after that).
func (d *deadline) watchClient(conn net.Conn) { d.watch = d.gone.watch(conn, d.cancel) }

// unwatchClient stops watchClient's watch; the context is not cancelled for it afterwards.
func (d *deadline) unwatchClient() {
	d.gone.unwatch(d.watch)
	d.watch = nil
}

// end releases the context; anything still using it is cancelled.
func (d *deadline) end() {
	d.timer.Stop()
	d.cancel(nil)
}

// err returns errRequestTimeout when the request timed out and errClientGone when its client
// left (whatever err that caused: a cancelled context reads as context.Canceled), else err.
func (d *deadline) err(err error) error {
	if err == nil {
		return nil
	}
	switch cause := context.Cause(d.ctx); cause {
	case errRequestTimeout, errClientGone:
		return cause
	}
	return err
}
