package server

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/triage-gw/triage/classifier"
	"github.com/triage-gw/triage/decision"
	"github.com/triage-gw/triage/upstream"
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
	HeaderSession   = "x-session-id"
)

// Path names, as in x-router-path and the decisions metric.
const (
	pathFast = "fast"
	pathSlow = "slow"
)

// scored is the batcher's result: a model output and the version of the model that made it,
// so the cache entry is keyed by the model that really answered even across a reload. err is
// set instead for a text the classifier refused, so one unreadable text fails only its own
// request and not everyone sharing its batch.
type scored struct {
	res     classifier.Result
	version string
	err     error
}

// runBatch is the batcher's Func: one Classify call on the current model, holding a
// reference so a reload cannot close the model under it. A text the classifier rejects
// (*classifier.TextError; it checks every text before any inference) gets its own error and
// the rest are classified again without it.
func (s *Server) runBatch(ctx context.Context, texts []string) ([]scored, error) {
	ref := s.models.acquire()
	if ref == nil {
		return nil, errNoModel
	}
	defer ref.release()
	out := make([]scored, len(texts))
	todo := make([]int, len(texts)) // indexes into texts still to classify
	for i := range todo {
		todo[i] = i
	}
	for len(todo) > 0 {
		batch := make([]string, len(todo))
		for j, i := range todo {
			batch[j] = texts[i]
		}
		res, err := ref.m.Classify(ctx, batch)
		var te *classifier.TextError
		if errors.As(err, &te) && te.Index >= 0 && te.Index < len(todo) {
			out[todo[te.Index]].err = badRequest("unclassifiable_text", "", "the classifier cannot read this text: %v", te.Err)
			todo = slices.Delete(todo, te.Index, te.Index+1)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("classifier %s: %w", ref.version, err)
		}
		if len(res) != len(batch) {
			return nil, fmt.Errorf("classifier %s: %d results for %d texts", ref.version, len(res), len(batch))
		}
		for j, i := range todo {
			if p := float64(res[j].PSlow); math.IsNaN(p) || p < 0 || p > 1 {
				return nil, fmt.Errorf("classifier %s: P(slow) = %v, outside [0, 1]", ref.version, p)
			}
			out[i] = scored{res: res[j], version: ref.version}
		}
		break
	}
	return out, nil
}

// score is the model's output for one text and where the time went.
type score struct {
	res                     classifier.Result
	version                 string
	hit                     bool
	cache, queue, inference time.Duration
}

// score looks text (already normalised) up in the cache and classifies it on a miss.
func (s *Server) score(ctx context.Context, text string) (score, error) {
	start := time.Now()
	version := s.models.version()
	if version == "" {
		return score{}, errNoModel
	}
	if r, ok := s.cache.get(version, text); ok {
		s.m.cacheRequests.WithLabelValues("hit").Inc()
		return score{res: r, version: version, hit: true, cache: time.Since(start)}, nil
	}
	s.m.cacheRequests.WithLabelValues("miss").Inc()
	lookup := time.Since(start)
	r, t, err := s.batch.SubmitTimed(ctx, text)
	if err == nil {
		err = r.err
	}
	if err != nil {
		return score{}, err
	}
	s.cache.set(r.version, text, r.res)
	return score{res: r.res, version: r.version, cache: lookup, queue: t.Queue, inference: t.Inference}, nil
}

// route is a decided request.
type route struct {
	score
	decision.Decision // the policy's own verdict; Threshold and Load are reported
	slow              bool
	reason            decision.Reason
	pool              *upstream.Pool
	// release frees the slow-path slot when one is held; a no-op otherwise. Idempotent.
	release func()
	decide  time.Duration
	decided time.Time
}

func noop() {}

// decide applies the policy to a score under the current load. With hold, a slow verdict
// must win the slow-path semaphore (else the request is shed to fast as slow_saturated) and
// the caller must call release when its upstream response has ended. Without hold (the
// classify endpoint, which executes nothing) the semaphore is only looked at.
func (s *Server) decide(sc score, hold bool) route {
	start := time.Now()
	d := s.policy.Decide(float64(sc.res.PSlow), s.state())
	r := route{score: sc, Decision: d, slow: d.Slow, reason: d.Reason, release: noop}
	if d.Slow {
		switch {
		case !s.slow.Healthy():
			r.slow, r.reason = false, decision.ReasonSlowUnhealthy
		case !hold:
			if s.sem.Active() >= s.sem.Max() {
				r.slow, r.reason = false, decision.ReasonSlowSaturated
			}
		case s.sem.TryAcquire():
			r.release = sync.OnceFunc(s.sem.Release)
		default:
			r.slow, r.reason = false, decision.ReasonSlowSaturated
		}
	}
	r.pool = s.fast
	if r.slow {
		r.pool = s.slow
	}
	r.decided = time.Now()
	r.decide = r.decided.Sub(start)
	return r
}

func (r *route) path() string {
	if r.slow {
		return pathSlow
	}
	return pathFast
}

func (r *route) cacheResult() string {
	if r.hit {
		return "hit"
	}
	return "miss"
}

// routeText scores and decides a request that will be executed, holding the slow slot if it
// goes slow, and records the decision and the router latency.
func (s *Server) routeText(ctx context.Context, rq *request, in textInput) (route, error) {
	sc, err := s.score(ctx, in.input)
	if err != nil {
		return route{}, err
	}
	r := s.decide(sc, true)
	s.m.decisions.WithLabelValues(r.path(), string(r.reason)).Inc()
	s.m.routerLatency.Observe(r.decided.Sub(rq.arrival).Seconds())
	return r, nil
}

// setRouteHeaders writes the decision headers and Server-Timing.
func setRouteHeaders(c *fiber.Ctx, rq *request, r *route) {
	c.Set(HeaderPath, r.path())
	c.Set(HeaderReason, string(r.reason))
	c.Set(HeaderPSlow, strconv.FormatFloat(float64(r.res.PSlow), 'f', 4, 32))
	c.Set(HeaderThreshold, strconv.FormatFloat(r.Threshold, 'f', 4, 64))
	c.Set(HeaderCache, r.cacheResult())
	c.Set(HeaderLatency, millis(r.decided.Sub(rq.arrival)))
	setServerTiming(c, r)
}

// setServerTiming writes the standard Server-Timing header: cache lookup, batcher queue,
// inference and decision, in milliseconds.
func setServerTiming(c *fiber.Ctx, r *route) {
	c.Set(fiber.HeaderServerTiming, fmt.Sprintf(`cache;desc="%s";dur=%s, queue;dur=%s, inference;dur=%s, decision;dur=%s`,
		r.cacheResult(), millis(r.cache), millis(r.queue), millis(r.inference), millis(r.decide)))
}

// millis formats d in milliseconds with microsecond precision ("0.734").
func millis(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 3, 64)
}

// deadline bounds one request by server.request_timeout. Unlike context.WithTimeout its timer
// can be stopped once a stream's headers are out, after which the stream is bounded by the
// pool's stream-idle timeout instead; its context parents the upstream request, so it must
// outlive the handler for streamed bodies.
type deadline struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	timer  *time.Timer
}

func (s *Server) newDeadline() *deadline {
	ctx, cancel := context.WithCancelCause(s.base)
	d := &deadline{ctx: ctx, cancel: cancel}
	d.timer = time.AfterFunc(s.cfg.Server.RequestTimeout, func() { cancel(errRequestTimeout) })
	return d
}

// stopTimer lifts the request timeout; end still has to be called.
func (d *deadline) stopTimer() { d.timer.Stop() }

// end releases the context; anything still using it is cancelled.
func (d *deadline) end() {
	d.timer.Stop()
	d.cancel(nil)
}

// err returns errRequestTimeout when the request timed out (whatever err the timeout caused:
// a cancelled context reads as context.Canceled), else err.
func (d *deadline) err(err error) error {
	if err != nil && context.Cause(d.ctx) == errRequestTimeout {
		return errRequestTimeout
	}
	return err
}
