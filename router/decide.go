package router

import (
	"context"
	"errors"
	"github.com/triage-gw/triage/classifier"
	"sync"
	"time"

	"github.com/triage-gw/triage/decision"
	"github.com/triage-gw/triage/upstream"
)

// Path names, as in x-router-path and the decisions metric.
const (
	PathFast = "fast"
	PathSlow = "slow"
)

// Route is a decided request: its score, the policy's verdict, and the pool it goes to.
type Route struct {
	Score
	// Decision is the policy's own verdict; its Threshold and Load are what is reported.
	Decision decision.Decision
	// Slow is the final path: the policy said slow and the slow path took the request.
	Slow bool
	// Reason explains Slow: the policy's reason, or slow_saturated / slow_unhealthy when the
	// policy said slow and the request was shed to fast.
	Reason decision.Reason
	// Pool is the pool the request goes to.
	Pool *upstream.Pool
	// DecideTime is the time the decision itself took; Decided is when it was made.
	DecideTime time.Duration
	Decided    time.Time
	// InBandAfter, when set, is the encoder's failure (classifier_timeout, classifier_busy,
	// classifier_unavailable) after which the route was decided on the first stage's in-band
	// score; the server reports it in x-router-in-band.
	InBandAfter decision.Reason

	release func()       // frees the slow-path slot; idempotent; nil when none is held
	share   *shareTicket // the slow-share observation made at completion; nil when none is due
}

// shareTicket is a routed request's observation in a tokens-unit slow-share window, made
// once when the request completes: with its tokens when the answer reported them (Used),
// else at Release as a request of unknown tokens.
type shareTicket struct {
	once  sync.Once
	b     *decision.ShareCap
	pSlow float64
	slow  bool
}

// observe records the request with tokens (negative: unknown); the first call wins.
func (t *shareTicket) observe(tokens int) {
	t.once.Do(func() { t.b.ObserveTokens(t.pSlow, t.slow, tokens) })
}

// Path is PathSlow or PathFast.
func (r *Route) Path() string {
	if r.Slow {
		return PathSlow
	}
	return PathFast
}

// Label is the routed label: 1 for slow, 0 for fast.
func (r *Route) Label() int {
	if r.Slow {
		return 1
	}
	return 0
}

// ModelLabel is the model's own label: 1 when it said slow, 0 otherwise.
func (r *Route) ModelLabel() int {
	if r.ModelSlow() {
		return 1
	}
	return 0
}

// Used reports the tokens the upstream answer cost, as the replica reported them, for the
// slow-share cap in its tokens unit (decision.share_unit); call it before Release. A
// route whose usage never arrives is counted at Release with the window's mean tokens. A
// no-op for other units and for routes outside the cap (pinned, fallback).
func (r *Route) Used(u upstream.Usage) {
	if r.share != nil {
		r.share.observe(u.PromptTokens + u.CompletionTokens)
	}
}

// Release frees the slow-path slot the route holds, if any, and in the tokens unit records
// the request in the slow-share window if Used did not. It is idempotent and must be called
// once the request's upstream response has ended (streams included).
func (r *Route) Release() {
	if r.share != nil {
		r.share.observe(-1)
	}
	if r.release != nil {
		r.release()
	}
}

// Classified reports whether the route was decided on a score (false for pinned and
// fallback routes, whose Score holds only the time spent).
func (r *Route) Classified() bool { return r.Version != "" }

// Route scores text (built by Input) and decides it under the current load for a request
// that will be executed. A slow verdict must win a slow slot (else the
// request is shed to fast as slow_saturated) and the caller must call Release when the
// upstream response has ended. The decision is counted in triage_decisions_total.
//
// The request waits for the encoder at most routing.classify_budget. When that runs out,
// the classifier's queue is full or the classifier is unavailable, routing.fallback places
// the request (reasons classifier_timeout, classifier_busy, classifier_unavailable; a slow
// fallback needs a slot like any slow route), or with reject the error is returned:
// ErrBudgetExceeded, ErrQueueFull or the classifier's own. Except when the cascade's first
// stage scored the text inside its band (Score.InBand): then the request is decided on that
// score as on any other (Route.InBandAfter names the failure), whatever routing.fallback
// says, since it is a classification, only a less sure one. Errors that are not the
// classifier's (ctx done, an unclassifiable text) are always returned.
func (r *Router) Route(ctx context.Context, text string) (Route, error) {
	sc, err := r.score(ctx, text, r.cfg.Routing.ClassifyBudget)
	if err != nil {
		reason, ok := classifierFailure(ctx, err)
		if !ok {
			return Route{}, err
		}
		r.m.fallbacks.WithLabelValues(string(reason)).Inc()
		if sc.InBand {
			// The first stage had an answer, only not a sure one: route on it.
			r.m.inBandRescues.WithLabelValues(string(reason)).Inc()
			rt := r.decide(Score{PSlow: sc.InBandPSlow, Tokens: sc.Tokens, Version: sc.Version, Cutoff: sc.Cutoff,
				Stage: classifier.StageStatic, CacheTime: sc.CacheTime, Static: sc.Static, Queue: sc.Queue}, true)
			rt.InBandAfter = reason
			r.m.decisions.WithLabelValues(rt.Path(), string(rt.Reason)).Inc()
			r.m.stageDecisions.WithLabelValues(rt.Stage.String()).Inc()
			return rt, nil
		}
		if r.cfg.Routing.Fallback == FallbackReject {
			return Route{}, err
		}
		rt := r.place(Score{CacheTime: sc.CacheTime, Static: sc.Static, Queue: sc.Queue}, r.cfg.Routing.Fallback == FallbackSlow, reason)
		r.m.decisions.WithLabelValues(rt.Path(), string(rt.Reason)).Inc()
		return rt, nil
	}
	rt := r.decide(sc, true)
	r.m.decisions.WithLabelValues(rt.Path(), string(rt.Reason)).Inc()
	r.m.stageDecisions.WithLabelValues(rt.Stage.String()).Inc()
	return rt, nil
}

// classifierFailure names the fallback reason of a scoring error that is the classifier's
// fault: its budget spent, its queue full, or a failed batch (a model error or panic). ok is
// false for the others: the request's own context, an unclassifiable text, and a closed
// router (ErrClosed, ErrNoModel), which means the gateway is shutting down.
func classifierFailure(ctx context.Context, err error) (decision.Reason, bool) {
	var uce *UnclassifiableError
	switch {
	case errors.Is(err, ErrBudgetExceeded):
		return decision.ReasonClassifierTimeout, true
	case errors.Is(err, ErrQueueFull):
		return decision.ReasonClassifierBusy, true
	case errors.As(err, &uce), errors.Is(err, ErrClosed), errors.Is(err, ErrNoModel),
		ctx.Err() != nil, errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "", false
	}
	return decision.ReasonClassifierUnavailable, true
}

// Pin routes a request that named a model only one pool serves, without classifying it:
// reason pinned. A request pinned to the slow pool holds a slow-path slot like any slow
// route, so the load every decision sees stays true; when every slot is taken it fails with
// ErrSlowSaturated rather than be sent to a model it did not ask for. It does not look at
// the slow pool's health: the pool answers for itself (no healthy replica). The decision is
// counted in triage_decisions_total.
func (r *Router) Pin(slow bool) (Route, error) {
	start := time.Now()
	rt := Route{Slow: slow, Reason: decision.ReasonPinned, Pool: r.fast}
	rt.Decision = decision.Decision{Slow: slow, Reason: decision.ReasonPinned, Threshold: r.Threshold(), Load: r.State().Load()}
	if slow {
		if !r.slots.TryAcquire() {
			return Route{}, ErrSlowSaturated
		}
		rt.release = sync.OnceFunc(r.slots.Release)
		rt.Pool = r.slow
	}
	rt.Decided = time.Now()
	rt.DecideTime = rt.Decided.Sub(start)
	r.m.decisions.WithLabelValues(rt.Path(), string(rt.Reason)).Inc()
	return rt, nil
}

// RouteNoText routes a request that has no text to classify (a user turn of images, audio
// or files alone): routing.fallback places it, reason no_text, as it places a request whose
// classification cannot be had; under reject it fails with ErrNoText. Refusing it outright
// would refuse a request every engine accepts. The decision is counted in
// triage_decisions_total.
func (r *Router) RouteNoText() (Route, error) {
	if r.cfg.Routing.Fallback == FallbackReject {
		return Route{}, ErrNoText
	}
	rt := r.place(Score{}, r.cfg.Routing.Fallback == FallbackSlow, decision.ReasonNoText)
	r.m.decisions.WithLabelValues(rt.Path(), string(rt.Reason)).Inc()
	return rt, nil
}

// place routes an unclassified request to the slow pool (when slow, the slow pool is
// healthy and a slot is free) or the fast one, for reason; like decide, a slow route that
// cannot be had is shed to fast as slow_unhealthy or slow_saturated.
func (r *Router) place(sc Score, slow bool, reason decision.Reason) Route {
	start := time.Now()
	st := r.State()
	rt := Route{Score: sc, Slow: slow, Reason: reason}
	rt.Decision = decision.Decision{Slow: slow, Reason: reason, Threshold: r.policy.Decide(decision.Score{Cutoff: r.cutoff()}, st).Threshold, Load: st.Load()}
	if slow {
		switch {
		case !r.slow.Healthy():
			rt.Slow, rt.Reason = false, decision.ReasonSlowUnhealthy
		case r.slots.TryAcquire():
			rt.release = sync.OnceFunc(r.slots.Release)
		default:
			rt.Slow, rt.Reason = false, decision.ReasonSlowSaturated
		}
	}
	rt.Pool = r.fast
	if rt.Slow {
		rt.Pool = r.slow
	}
	rt.Decided = time.Now()
	rt.DecideTime = rt.Decided.Sub(start)
	return rt
}

// Preview scores and decides text like Route but executes nothing and holds nothing: the
// slow slots are only looked at. It is what a routed request would get now (the
// /v1/classify endpoint). Previews are not counted as decisions.
func (r *Router) Preview(ctx context.Context, text string) (Route, error) {
	sc, err := r.score(ctx, text, 0)
	if err != nil {
		return Route{}, err
	}
	return r.decide(sc, false), nil
}

// PreviewMany is Preview for several texts at once: the shared-tier lookups of all of them
// go in one round trip and the misses are submitted together, so they share batches.
// errs[i] is set for a text that failed; its route is zero.
func (r *Router) PreviewMany(ctx context.Context, texts []string) ([]Route, []error) {
	scores := make([]Score, len(texts))
	errs := make([]error, len(texts))
	r.scoreMany(ctx, texts, scores, errs, 0)
	routes := make([]Route, len(texts))
	for i := range texts {
		if errs[i] == nil {
			routes[i] = r.decide(scores[i], false)
		}
	}
	return routes, errs
}

// decide applies the policy to a score under the current load. With hold, a slow verdict
// takes a slow slot; without it the slots are only looked at.
func (r *Router) decide(sc Score, hold bool) Route {
	start := time.Now()
	d := r.policy.Decide(decision.Score{PSlow: float64(sc.PSlow), Cutoff: sc.Cutoff}, r.State())
	rt := Route{Score: sc, Decision: d, Slow: d.Slow, Reason: d.Reason}
	if d.Slow {
		switch {
		case !r.slow.Healthy():
			rt.Slow, rt.Reason = false, decision.ReasonSlowUnhealthy
		case !hold:
			if r.slots.Active() >= r.slots.Max() {
				rt.Slow, rt.Reason = false, decision.ReasonSlowSaturated
			}
		case r.slots.TryAcquire():
			rt.release = sync.OnceFunc(r.slots.Release)
		default:
			rt.Slow, rt.Reason = false, decision.ReasonSlowSaturated
		}
	}
	rt.Pool = r.fast
	if rt.Slow {
		rt.Pool = r.slow
	}
	switch {
	case !hold:
		// Executed routed requests make the slow-share window; previews, pinned and fallback
		// requests stay out of it.
	case r.cfg.Decision.ShareUnit == decision.ShareUnitTokens:
		// Their tokens are known when the answer ends: Used or Release observes them then,
		// with the score and path decided now.
		rt.share = &shareTicket{b: r.share, pSlow: float64(sc.PSlow), slow: rt.Slow}
	default:
		r.share.Observe(float64(sc.PSlow), rt.Slow)
	}
	rt.Decided = time.Now()
	rt.DecideTime = rt.Decided.Sub(start)
	return rt
}

// State snapshots the load a decision is made under, the slow-share cap's floor included.
func (r *Router) State() decision.State {
	return decision.State{SlowActive: r.slots.Active(), SlowMax: r.slots.Max(), QueueLen: r.batch.QueueLen(),
		ShareFloor: r.share.Threshold()}
}

// SlowShare returns the share of the routed requests in the slow-share window
// (decision.share_window) that went slow, in decision.share_unit (of their tokens in the
// tokens unit), and how many requests there were.
func (r *Router) SlowShare() (share float64, n int) { return r.share.Share() }

// ShareCap returns the configured cap on the slow share (decision.max_slow_share, 0: none)
// and the unit it is counted in (decision.share_unit).
func (r *Router) ShareCap() (max float64, unit string) {
	return r.cfg.Decision.MaxSlowShare, r.cfg.Decision.ShareUnit
}

// Threshold is the P(slow) a request must exceed to go slow under the current load.
func (r *Router) Threshold() float64 {
	return r.policy.Decide(decision.Score{Cutoff: r.cutoff()}, r.State()).Threshold
}

// cutoff is the label threshold of the most recent model, kept after Close.
func (r *Router) cutoff() float64 {
	if l := r.models.last.Load(); l != nil {
		return l.cutoff
	}
	return 0
}
