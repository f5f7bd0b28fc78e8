package upstream

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strings"
	"sync/atomic"
)

// RetryConfig is a pool's retry rule: after which failures of a try the request is sent
// again, how many tries it gets and where the next one goes.
//
// The requests a pool forwards are not idempotent: a chat completion that reached a replica
// may have been generated, and billed, already; sending it again doubles the work and,
// should both answer, the cost. So by default a request is tried again only when the failure
// says that the replica did not execute it: the connection could not be opened (nothing was
// sent), the request could not be written whole (a replica cannot run a request it has not
// received), or the replica answered that it is busy (429, or 503 with Retry-After: "come
// back later", not "I tried"). A reset after the request was written, a first-byte timeout
// and a 500, 502 or plain 503 may all follow an execution, and are passed on unless listed in
// On. docs/configuration.md ("Retries") says why for each.
type RetryConfig struct {
	// MaxTries is the most tries one request gets, the first included: 1 never retries.
	// Default 2, at most 5.
	MaxTries int `yaml:"max_tries" json:"max_tries"`
	// On lists the failures of a try after which the next try is made (RetryOn values).
	// Default [dial_error, reset_before_write, status_429, status_503_retry_after]. Empty
	// retries nothing.
	On []RetryOn `yaml:"on" json:"on"`
	// Replica is where a retry goes: "other" (default), a replica this request has not
	// tried yet — with none left the last answer stands; "any", whichever the policy picks,
	// the same one included (a pool of one replica that restarts).
	Replica string `yaml:"replica" json:"replica"`
}

// RetryOn names one way a try can fail before any of its answer is passed on. Every try
// ends in exactly one of these or in an answer passed on (triage_upstream_tries_total).
type RetryOn string

const (
	// RetryDialError: no connection could be opened (refused, unreachable, connect timeout,
	// TLS handshake): nothing was sent.
	RetryDialError RetryOn = "dial_error"
	// RetryResetBeforeWrite: the connection broke before the request was written whole: the
	// replica cannot have run it.
	RetryResetBeforeWrite RetryOn = "reset_before_write"
	// RetryResetBeforeHeaders: the request was written, and the connection closed or reset
	// before any response header. The replica may have run it. A replica that closes without
	// reading a small request lands here too: the request was already in the socket buffers.
	RetryResetBeforeHeaders RetryOn = "reset_before_headers"
	// RetryFirstByteTimeout: no response headers within timeouts.first_byte; the replica may
	// be generating the answer (a non-streaming answer's headers come when it is done).
	RetryFirstByteTimeout RetryOn = "first_byte_timeout"
	// RetryStatus429: the replica answered 429: it refused the request.
	RetryStatus429 RetryOn = "status_429"
	// RetryStatus503RetryAfter: 503 with Retry-After: the replica is full and refused it.
	RetryStatus503RetryAfter RetryOn = "status_503_retry_after"
	// RetryStatus503: 503 without Retry-After; a proxy in front of a replica (Envoy) answers it
	// after a reset, so it may follow an execution.
	RetryStatus503 RetryOn = "status_503"
	// RetryStatus500: the engine failed, possibly while generating.
	RetryStatus500 RetryOn = "status_500"
	// RetryStatus502: a proxy in front of the replica lost it, possibly mid-request.
	RetryStatus502 RetryOn = "status_502"
)

// retryOns are the RetryOn values in a fixed order, their index a try outcome.
var retryOns = [...]RetryOn{
	RetryDialError, RetryResetBeforeWrite, RetryResetBeforeHeaders, RetryFirstByteTimeout,
	RetryStatus429, RetryStatus503RetryAfter, RetryStatus503, RetryStatus500, RetryStatus502,
}

// Where a retry goes.
const (
	RetryReplicaOther = "other"
	RetryReplicaAny   = "any"
)

// maxTriesLimit bounds RetryConfig.MaxTries, and so the try label's values.
const maxTriesLimit = 5

// DefaultRetryConfig retries only what was certainly not executed, once, elsewhere.
func DefaultRetryConfig() RetryConfig {
	return RetryConfig{
		MaxTries: 2,
		On:       []RetryOn{RetryDialError, RetryResetBeforeWrite, RetryStatus429, RetryStatus503RetryAfter},
		Replica:  RetryReplicaOther,
	}
}

// ValidateAt reports every problem in c, each naming its field from path.
func (c *RetryConfig) ValidateAt(path string) error {
	var errs []error
	if c.MaxTries < 1 || c.MaxTries > maxTriesLimit {
		errs = append(errs, fmt.Errorf("%s.max_tries: must be 1 (no retries) to %d, got %d", path, maxTriesLimit, c.MaxTries))
	}
	names := make([]string, len(retryOns))
	for i, o := range retryOns {
		names[i] = string(o)
	}
	for i, o := range c.On {
		if !slices.Contains(retryOns[:], o) {
			errs = append(errs, fmt.Errorf("%s.on[%d]: unknown failure %q (want one of %s)", path, i, o, strings.Join(names, ", ")))
		} else if slices.Index(c.On, o) < i {
			errs = append(errs, fmt.Errorf("%s.on[%d]: %q listed twice", path, i, o))
		}
	}
	if c.Replica != RetryReplicaOther && c.Replica != RetryReplicaAny {
		errs = append(errs, fmt.Errorf("%s.replica: must be %q or %q, got %q", path, RetryReplicaOther, RetryReplicaAny, c.Replica))
	}
	return errors.Join(errs...)
}

// tryOutcome is how one try ended: a RetryOn (its index in retryOns), or one of the values
// after them. The label values of triage_upstream_tries_total.
type tryOutcome int

const (
	// tryAnswered: response headers came with a status that is no RetryOn (2xx, 4xx but 429,
	// 501, 504, ...).
	tryAnswered tryOutcome = tryOutcome(len(retryOns)) + iota
	// tryCanceled: the caller went away.
	tryCanceled
	// tryInvalidRequest: the request could not be built.
	tryInvalidRequest
	numTryOutcomes
)

func (o tryOutcome) String() string {
	switch o {
	case tryAnswered:
		return "answered"
	case tryCanceled:
		return "canceled"
	case tryInvalidRequest:
		return "invalid_request"
	}
	return string(retryOns[o])
}

func outcomeOf(on RetryOn) tryOutcome { return tryOutcome(slices.Index(retryOns[:], on)) }

// retryRule is a RetryConfig ready for the request path.
type retryRule struct {
	maxTries int
	on       [numTryOutcomes]bool
	any      bool // the same replica may be tried again
}

func newRetryRule(c RetryConfig) retryRule {
	r := retryRule{maxTries: c.MaxTries, any: c.Replica == RetryReplicaAny}
	for _, o := range c.On {
		r.on[outcomeOf(o)] = true
	}
	return r
}

// connTrace follows one try's connection through net/http's client trace, so a failure
// before any response header can be told apart: no connection, a request not written whole,
// or a request written. Its fields are set from the transport's goroutines.
type connTrace struct {
	gotConn atomic.Bool // a connection was obtained (the last one, if the transport retried on its own)
	wrote   atomic.Bool // the request was written whole on it
}

func (ct *connTrace) context(ctx context.Context) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(httptrace.GotConnInfo) {
			ct.gotConn.Store(true)
			ct.wrote.Store(false)
		},
		WroteRequest: func(i httptrace.WroteRequestInfo) { ct.wrote.Store(i.Err == nil) },
	})
}

// connFailure classifies a RoundTrip error that came before any response header (the
// caller's cancellation and the first-byte timeout are told apart before this). traced is
// whether the transport reports connections to a client trace (net/http's does); an injected
// RoundTripper that does not is only credited with a dial error it names as one.
func connFailure(err error, ct *connTrace, traced bool) RetryOn {
	switch {
	case ct.gotConn.Load() && !ct.wrote.Load():
		return RetryResetBeforeWrite
	case ct.gotConn.Load():
		return RetryResetBeforeHeaders
	case traced, isDialError(err):
		return RetryDialError
	}
	return RetryResetBeforeHeaders
}

// isDialError: the error says no connection was opened.
func isDialError(err error) bool {
	var op *net.OpError
	var dns *net.DNSError
	var cert *tls.CertificateVerificationError
	var rec tls.RecordHeaderError
	return (errors.As(err, &op) && op.Op == "dial") || errors.As(err, &dns) || errors.As(err, &cert) || errors.As(err, &rec)
}

// statusFailure is the RetryOn of a status, or false for a status that is passed on.
func statusFailure(status int, h http.Header) (RetryOn, bool) {
	switch status {
	case http.StatusTooManyRequests:
		return RetryStatus429, true
	case http.StatusServiceUnavailable:
		if h.Get("Retry-After") != "" {
			return RetryStatus503RetryAfter, true
		}
		return RetryStatus503, true
	case http.StatusInternalServerError:
		return RetryStatus500, true
	case http.StatusBadGateway:
		return RetryStatus502, true
	}
	return "", false
}
