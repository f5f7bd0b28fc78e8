package upstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/triage-gw/triage/upstream/policy"
)

// ErrUpstreamTimeout is wrapped by the *UpstreamError of an attempt that hit
// the first-byte timeout (no response headers in time) or the stream-idle
// timeout (no body bytes in time). The HTTP layer answers 504 for it, and
// 502 for any other *UpstreamError.
var ErrUpstreamTimeout = errors.New("upstream timeout")

// ErrInvalidBody is returned when a request's body must be rewritten (a
// model name set) but is not a single JSON object.
var ErrInvalidBody = errors.New("request body is not a JSON object")

// Causes attached to an attempt's context, so a failed read can tell why
// the context ended.
var (
	errFirstByteTimeout = errors.New("first-byte timeout")
	errStreamIdle       = errors.New("stream idle timeout")
	errBodyClosed       = errors.New("response body closed")
	errRetried          = errors.New("retried on another replica")
)

// UpstreamError is a failure of the replica or of the path to it: it could
// not be reached, it broke the connection, or it timed out.
type UpstreamError struct {
	Pool    string
	Replica string
	Err     error
}

func (e *UpstreamError) Error() string {
	return fmt.Sprintf("upstream %s/%s: %v", e.Pool, e.Replica, e.Err)
}

func (e *UpstreamError) Unwrap() error { return e.Err }

// ForwardRequest is one request to send to some replica of a pool.
type ForwardRequest struct {
	// Method is the HTTP method; "" means GET, as in net/http.
	Method string
	// Path is the absolute path with optional query, appended to the
	// replica's base URL: "/v1/chat/completions".
	Path string
	// Header is sent as is, minus hop-by-hop headers (Connection and those
	// it names, Keep-Alive, TE, Trailer, Transfer-Encoding, Upgrade,
	// Proxy-*), Host and Content-Length. The replica's configured Headers
	// replace same-named ones. The caller decides what crosses: it should
	// not pass the gateway's own credentials. Content-Type defaults to
	// application/json when Body is non-empty. May be nil.
	Header http.Header
	// Body is sent with every attempt, so a retry replays it exactly.
	Body []byte
	// SetModel rewrites the body's top-level "model" field to the chosen
	// replica's model (see RewriteModel) on each attempt; a retry on a
	// replica with another model sends that one. Replicas without a model
	// get Body unchanged.
	SetModel bool
	// Routing is what the pool's Admitter and Picker see.
	Routing policy.Request
}

// Response is a replica's answer. Body must be closed exactly once, whether
// or not it was read; Close ends the request's accounting (in-flight count,
// outcome metric, the picker's Done) and cancels the upstream request.
type Response struct {
	Status int
	// Header is the replica's response header minus hop-by-hop headers.
	Header http.Header
	// Body streams the replica's body as it arrives. A Read that waits
	// longer than the pool's StreamIdle timeout for more bytes fails with an
	// *UpstreamError wrapping ErrUpstreamTimeout and cancels the upstream.
	Body io.ReadCloser
	// ReplicaID names the replica that answered.
	ReplicaID string
	// Model is the model name sent to that replica ("" if none configured).
	Model string
	// TTFB is the time from sending the request to receiving the headers.
	TTFB time.Duration
	// Retried reports that a first attempt on another replica failed before
	// the first byte.
	Retried bool
	// Prefill is the prefill leg of a disaggregated request (see Pool.Do); nil
	// when none was tried. ReplicaID and TTFB are then the decode leg's.
	Prefill *PrefillLeg
	// Fallback is why a request of a disaggregated pool ran whole on one
	// replica instead (a FallbackReason); "" when it did not.
	Fallback FallbackReason
	// Predicted reports that the gateway had a prediction of what the replica
	// that answered held when it picked it, from the replica's KV-cache
	// events; false when the replica publishes none, they were not live, or
	// the request was not tokenized (and the two counts below are 0).
	Predicted bool
	// PredictedCachedTokens is how many leading prompt tokens the replica
	// held as its engine's events had told the gateway when it was picked
	// (whole blocks): the prediction of the engine's cached_tokens.
	PredictedCachedTokens int
	// PendingCachedTokens is how many further leading tokens the policy
	// counted as held there only because earlier picks had just sent them
	// (the pending window): blocks the engine had not yet reported stored,
	// and may still be computing for another request.
	PendingCachedTokens int

	body *responseBody
}

// SetOutputTokens records the response's output token count for the
// picker's Done, replacing the pool's own estimate. Call it before closing
// Body. Without it, the pool counts SSE "data:" events (one per chunk,
// "[DONE]" excluded, which approximates tokens for servers that stream one
// token per chunk) or, when the replica reported usage (a JSON body up to
// 1 MiB, or a stream's usage chunk), takes its completion_tokens.
func (r *Response) SetOutputTokens(n int) {
	r.body.mu.Lock()
	r.body.override = n
	r.body.mu.Unlock()
}

// Usage returns the token counts the replica reported for this answer: the
// JSON body's "usage", or a stream's usage chunk (sent when the request asked
// for stream_options.include_usage). ok is false before the body has been
// read to its end, and for an answer without usage (a stream that did not ask
// for it, an error body, a JSON body over 1 MiB). The pool counts the same
// numbers in triage_upstream_tokens_total when Body is closed.
func (r *Response) Usage() (u Usage, ok bool) {
	r.body.mu.Lock()
	defer r.body.mu.Unlock()
	if !r.body.eof {
		return Usage{}, false
	}
	return r.body.tokens.reported()
}

// Do sends fr to one replica and returns its response, streaming.
//
// Steps: admission (ErrRejected), pick among available replicas below their
// in-flight cap (ErrNoHealthyReplica when none), send. A try that fails
// before any of its answer is passed on, in a way the pool's retry rule
// (PoolConfig.Retry) lists, is followed by another while ctx is alive and
// tries are left, on another replica unless the rule says any (ctx's deadline
// bounds the wait); with no replica left, the last try's result stands (a
// status answer is then returned as a response). Nothing is retried once
// response headers have been handed to the caller. A 429, or a 503 with
// Retry-After, means the replica is busy: it never counts toward ejection.
//
// Errors: ErrRejected and ErrNoHealthyReplica (wrapped), ErrInvalidBody
// when SetModel is set and Body is not a JSON object, ErrInvalidRequest
// (a *HeaderError for a header value HTTP forbids) before any replica is
// tried, ctx's error when the
// caller went away, and *UpstreamError for replica failures
// (errors.Is(err, ErrUpstreamTimeout) for the first-byte timeout).
// A non-2xx status from the replica is not an error: it is returned as a
// Response to pass through.
//
// In a disaggregated pool (some replica has role prefill) a chat or completion
// request runs in two legs, prefill then decode (see disagg.go and
// DisaggregationConfig); when the prefill leg fails it runs whole on a decode
// or both replica as above, and Response.Fallback says why.
func (p *Pool) Do(ctx context.Context, fr *ForwardRequest) (*Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("pool %s: %w", p.cfg.Name, err)
	}
	if !strings.HasPrefix(fr.Path, "/") {
		return nil, fmt.Errorf("pool %s: path %q must start with \"/\"", p.cfg.Name, fr.Path)
	}
	if fr.Method != "" && !validHeaderName(fr.Method) {
		return nil, fmt.Errorf("pool %s: %w: invalid method %q", p.cfg.Name, ErrInvalidRequest, fr.Method)
	}
	// A header no replica can be sent is refused here, before a replica is
	// picked: net/http would refuse it inside RoundTrip, where it would look
	// like a connection failure and count against every replica it tried.
	if err := checkHeaders(fr.Header); err != nil {
		return nil, fmt.Errorf("pool %s: %w", p.cfg.Name, err)
	}
	var doc *modelDoc
	if fr.SetModel {
		d, err := parseModelDoc(fr.Body)
		if err != nil {
			return nil, fmt.Errorf("pool %s: %w", p.cfg.Name, err)
		}
		doc = d
	}
	req := &fr.Routing
	if p.admitter != nil {
		if err := p.admitter.Admit(req); err != nil {
			return nil, fmt.Errorf("pool %s: %w", p.cfg.Name, err)
		}
	}

	p.attachCache(ctx, fr)
	if p.pd != nil && p.pd.applies(fr) {
		return p.doDisagg(ctx, fr, doc)
	}
	r, load, err := p.acquire(req, nil)
	if err != nil {
		return nil, err
	}
	return p.doWhole(ctx, fr, doc, r, load, nil)
}

// doWhole runs fr whole, first on r (acquired, with load its in-flight count as the picker
// saw it), then as the pool's retry rule says, never on a replica named in avoid.
func (p *Pool) doWhole(ctx context.Context, fr *ForwardRequest, doc *modelDoc, r *replica, load int, avoid []string) (*Response, error) {
	req := &fr.Routing
	var buf [maxTriesLimit + 1]string
	tried := append(buf[:0], avoid...)
	for try := 1; ; try++ {
		a := p.send(ctx, fr, doc, r, load)
		p.tries[try-1][a.ended].Inc()
		if try >= p.retry.maxTries || !p.retry.on[a.ended] || ctx.Err() != nil {
			return a.result(try > 1)
		}
		tried = append(tried, r.id)
		exclude := avoid
		if !p.retry.any {
			exclude = tried
		}
		next, nextLoad, err := p.acquire(req, exclude)
		if err != nil {
			return a.result(try > 1) // nowhere else to go: this answer stands
		}
		p.log.Warn("retrying", "replica", r.id, "next_replica", next.id, "next_try", try+1,
			"failure", a.ended.String(), "err", a.reason())
		a.discard()
		p.retries.Inc()
		r, load = next, nextLoad
	}
}

// attempt is one try of a request on one replica, from acquire to either
// result (which hands the body to the caller) or discard.
type attempt struct {
	p      *Pool
	r      *replica
	req    *policy.Request
	parent context.Context // the caller's
	actx   context.Context // the upstream request's, derived from parent
	cancel context.CancelCauseFunc
	by     *chooser  // the policy that picked r: its Done and TTFT observer
	load   int       // the replica's in-flight count when it was picked
	start  time.Time // when the request was sent: TTFB and TTFT run from here

	resp *http.Response // set when headers arrived
	ttfb time.Duration
	err  error   // set when they did not
	fail outcome // with err
	// ended is how the try ended, for the retry rule and triage_upstream_tries_total.
	ended tryOutcome
	// unpriced: a prefill leg, whose usage the decode leg's repeats; its
	// tokens are counted, not priced.
	unpriced bool
}

// send makes one attempt on r, which acquire has already charged; load is
// r's in-flight count as the picker saw it.
func (p *Pool) send(ctx context.Context, fr *ForwardRequest, doc *modelDoc, r *replica, load int) *attempt {
	return p.sendBy(ctx, &p.whole, fr, doc, r, load)
}

// sendBy is send for a replica that ch picked (acquireBy).
func (p *Pool) sendBy(ctx context.Context, ch *chooser, fr *ForwardRequest, doc *modelDoc, r *replica, load int) *attempt {
	a := &attempt{p: p, r: r, by: ch, req: &fr.Routing, parent: ctx, load: load}
	a.actx, a.cancel = context.WithCancelCause(ctx)

	body := fr.Body
	if doc != nil && r.model != "" {
		body = doc.with(r.model)
	}
	var trace connTrace
	hreq, err := http.NewRequestWithContext(trace.context(a.actx), fr.Method, r.endpoint(fr.Path), bytes.NewReader(body))
	if err != nil {
		// The request itself is malformed: not the replica's fault, so not
		// observed and not retried.
		a.err = fmt.Errorf("pool %s: %w: %v", p.cfg.Name, ErrInvalidRequest, err)
		a.fail = outcomeInvalidRequest
		a.ended = tryInvalidRequest
		return a
	}
	hreq.Header = forwardHeader(fr.Header)
	for k, v := range r.headers {
		hreq.Header[k] = []string{v}
	}
	if len(body) > 0 && hreq.Header.Get("Content-Type") == "" {
		hreq.Header.Set("Content-Type", "application/json")
	}

	firstByte := p.cfg.Timeouts.FirstByte.Std()
	a.start = time.Now()
	timer := time.AfterFunc(firstByte, func() { a.cancel(errFirstByteTimeout) })
	resp, err := p.transport.RoundTrip(hreq)
	fired := !timer.Stop()
	a.ttfb = time.Since(a.start)
	if err == nil && fired {
		// Headers and the timer arrived together; the context is already
		// cancelled, so the body is unusable.
		resp.Body.Close()
		err = errFirstByteTimeout
	}

	switch {
	case err == nil:
		a.resp = resp
		a.ended = tryAnswered
		if on, ok := statusFailure(resp.StatusCode, resp.Header); ok {
			a.ended = outcomeOf(on)
		}
		r.metrics.ttfb.Observe(a.ttfb.Seconds())
		p.observeResponse(r, resp, a.ttfb)
	case ctx.Err() != nil:
		a.err = fmt.Errorf("pool %s: %w", p.cfg.Name, ctx.Err())
		a.fail = outcomeCanceled
		a.ended = tryCanceled
	case context.Cause(a.actx) == errFirstByteTimeout:
		a.err = &UpstreamError{Pool: p.cfg.Name, Replica: r.id,
			Err: fmt.Errorf("%w: no response headers within %s", ErrUpstreamTimeout, firstByte)}
		a.fail = outcomeTimeout
		a.ended = outcomeOf(RetryFirstByteTimeout)
		p.observe(r, false)
	default:
		a.err = &UpstreamError{Pool: p.cfg.Name, Replica: r.id, Err: err}
		a.fail = outcomeConnectError
		a.ended = outcomeOf(connFailure(err, &trace, p.traced))
		p.observe(r, false)
	}
	return a
}

// busy reports an answer that says the replica is full rather than broken: 429, or 503 with
// Retry-After. It never counts toward ejection, so a pool does not lose its replicas exactly
// when it needs them (and the default retry rule sends the request elsewhere).
func busy(status int, h http.Header) bool {
	return status == http.StatusTooManyRequests ||
		(status == http.StatusServiceUnavailable && h.Get("Retry-After") != "")
}

// observeResponse folds an answer into passive health: busy is neither a failure nor a
// success; any other 5xx is a failure, and so is an answer whose headers came later than
// passive_ejection.slow_first_byte (when set), so a replica that is slow without timing out
// is seen too.
func (p *Pool) observeResponse(r *replica, resp *http.Response, ttfb time.Duration) {
	slow := p.cfg.PassiveEjection.SlowFirstByte.Std()
	switch {
	case busy(resp.StatusCode, resp.Header):
	case resp.StatusCode >= 500:
		p.observe(r, false)
	case slow > 0 && ttfb > slow:
		p.observe(r, false)
	default:
		p.observe(r, true)
	}
}

func (a *attempt) reason() string {
	if a.resp != nil {
		return fmt.Sprintf("status %d", a.resp.StatusCode)
	}
	return a.err.Error()
}

// discard ends an attempt that is being retried elsewhere.
func (a *attempt) discard() {
	if a.resp != nil {
		a.resp.Body.Close()
	}
	a.cancel(errRetried)
	a.p.release(a.by, a.r, a.req, outcomeRetried, 0, report{})
}

// result hands the attempt to the caller: an error (and the attempt ends
// here) or a Response whose Body.Close ends it.
func (a *attempt) result(retried bool) (*Response, error) {
	if a.resp == nil {
		a.cancel(nil)
		a.p.release(a.by, a.r, a.req, a.fail, 0, report{})
		return nil, a.err
	}
	removeHopByHop(a.resp.Header)
	b := newResponseBody(a)
	stored, pending, predicted := pickPrediction(a.req, a.r.id)
	return &Response{
		Status:    a.resp.StatusCode,
		Header:    a.resp.Header,
		Body:      b,
		ReplicaID: a.r.id,
		Model:     a.r.model,
		TTFB:      a.ttfb,
		Retried:   retried,
		body:      b,

		Predicted:             predicted,
		PredictedCachedTokens: stored,
		PendingCachedTokens:   pending,
	}, nil
}
