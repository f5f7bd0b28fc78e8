package upstream

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// outcome is how one upstream attempt ended; the label values of
// triage_upstream_requests_total.
type outcome int

const (
	// outcomeOK: a response with status < 500 was read to its end.
	outcomeOK outcome = iota
	// outcomeErrorStatus: the replica answered 5xx (and no retry followed).
	outcomeErrorStatus
	// outcomeConnectError: no response headers arrived (dial failure,
	// connection reset or closed before headers).
	outcomeConnectError
	// outcomeTimeout: the first-byte or stream-idle timeout fired.
	outcomeTimeout
	// outcomeCanceled: the caller went away (context canceled, or the body
	// was closed before its end).
	outcomeCanceled
	// outcomeRetried: the attempt failed before the first byte and the
	// request went on to another replica.
	outcomeRetried
	// outcomeStreamError: the body broke off after the headers arrived.
	outcomeStreamError
	// outcomeInvalidRequest: the request could not be built for this
	// replica; the caller's fault, never counted against the replica.
	outcomeInvalidRequest
	// outcomeBusy: the replica answered that it is full (429, or 503 with
	// Retry-After) and no retry followed; never counted against it.
	outcomeBusy
	numOutcomes
)

var outcomeNames = [numOutcomes]string{
	outcomeOK:             "ok",
	outcomeErrorStatus:    "error_status",
	outcomeConnectError:   "connect_error",
	outcomeTimeout:        "timeout",
	outcomeCanceled:       "canceled",
	outcomeRetried:        "retried",
	outcomeStreamError:    "stream_error",
	outcomeInvalidRequest: "invalid_request",
	outcomeBusy:           "busy",
}

func (o outcome) String() string { return outcomeNames[o] }

// metrics are shared by every pool registered on the same Registerer; the
// pool label tells them apart.
type metrics struct {
	inflight  *prometheus.GaugeVec
	requests  *prometheus.CounterVec
	ttfb      *prometheus.HistogramVec
	ttft      *prometheus.HistogramVec
	slo       *prometheus.CounterVec
	healthy   *prometheus.GaugeVec
	retries   *prometheus.CounterVec
	tries     *prometheus.CounterVec
	ejections *prometheus.CounterVec
	evictions *prometheus.CounterVec

	tokens       *prometheus.CounterVec
	unmetered    *prometheus.CounterVec
	cost         *prometheus.CounterVec
	baselineCost *prometheus.CounterVec

	scrapedWaiting *prometheus.GaugeVec
	scrapedRunning *prometheus.GaugeVec
	scrapedKV      *prometheus.GaugeVec
	scrapeAge      *prometheus.GaugeVec
	scrapeFailures *prometheus.CounterVec
}

// newMetrics registers the upstream metrics on reg. A second call with the
// same reg (a second pool) reuses the collectors already registered.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	var errs []error
	m := &metrics{
		inflight: registerOrReuse(reg, &errs, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "triage_upstream_inflight",
			Help: "Requests sent to a replica and not yet finished (router-local count).",
		}, []string{"pool", "replica"})),
		requests: registerOrReuse(reg, &errs, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "triage_upstream_requests_total",
			Help: "Upstream attempts by how they ended: ok, error_status, connect_error, timeout, canceled, retried, stream_error.",
		}, []string{"pool", "replica", "outcome"})),
		ttfb: registerOrReuse(reg, &errs, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "triage_upstream_ttfb_seconds",
			Help:    "Time from sending a request upstream to receiving the response headers.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 15), // 5ms .. ~82s
		}, []string{"pool", "replica"})),
		ttft: registerOrReuse(reg, &errs, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "triage_upstream_ttft_seconds",
			Help:    "Time from sending a request upstream to its first token event, for streamed 2xx answers (a non-streamed answer's first token is not visible).",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 15), // 5ms .. ~82s
		}, []string{"pool", "replica"})),
		slo: registerOrReuse(reg, &errs, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "triage_upstream_slo_total",
			Help: "Streamed 2xx answers with a TTFT target (x-slo-ttft-ms, else the pool's policy.slo.ttft_target), by whether the first token came within it (outcome: met, missed).",
		}, []string{"pool", "outcome"})),
		healthy: registerOrReuse(reg, &errs, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "triage_upstream_replica_healthy",
			Help: "1 if the replica may take new requests (passing checks, not ejected, not draining), else 0.",
		}, []string{"pool", "replica"})),
		retries: registerOrReuse(reg, &errs, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "triage_upstream_retries_total",
			Help: "Requests retried on another replica after failing before the first byte.",
		}, []string{"pool"})),
		tries: registerOrReuse(reg, &errs, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "triage_upstream_tries_total",
			Help: "Tries of a request by their number (try: 1 is the first, up to the pool's retry.max_tries) and how they ended (outcome: answered, canceled, invalid_request, or a retry.on failure: dial_error, reset_before_write, reset_before_headers, first_byte_timeout, status_429, status_503_retry_after, status_503, status_500, status_502), whether or not a retry followed.",
		}, []string{"pool", "try", "outcome"})),
		ejections: registerOrReuse(reg, &errs, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "triage_upstream_ejections_total",
			Help: "Passive ejections of a replica after consecutive request failures.",
		}, []string{"pool", "replica"})),
		evictions: registerOrReuse(reg, &errs, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "triage_upstream_policy_evictions_total",
			Help: "Entries the replica policy dropped from a table keyed by client-chosen values to stay within its bound (table: users, sessions, prefix_blocks).",
		}, []string{"pool", "table"})),
		tokens: registerOrReuse(reg, &errs, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "triage_upstream_tokens_total",
			Help: "Tokens of answered requests as the replica reported them in its usage object (kind: prompt, completion).",
		}, []string{"pool", "replica", "kind"})),
		unmetered: registerOrReuse(reg, &errs, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "triage_upstream_unmetered_total",
			Help: "Answers (2xx) without a usage object, so not in triage_upstream_tokens_total: streams cut before their usage chunk, replicas that send none.",
		}, []string{"pool", "replica"})),
		cost: registerOrReuse(reg, &errs, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "triage_upstream_cost_total",
			Help: "What the pool's metered tokens cost at its configured prices (pools.<name>.prices), in the prices' currency.",
		}, []string{"pool"})),
		baselineCost: registerOrReuse(reg, &errs, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "triage_upstream_cost_baseline_total",
			Help: "What the pool's metered tokens would have cost at the slow pool's prices: summed over pools, the cost had every request gone slow.",
		}, []string{"pool"})),
		// The load signals the policies read, as of the latest successful scrape: a failed
		// scrape leaves them as they were, like the policy's view (see scrapeOnce).
		scrapedWaiting: registerOrReuse(reg, &errs, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "triage_upstream_scraped_waiting_requests",
			Help: "Requests waiting in the replica's queue (vllm:num_requests_waiting or the engine's equivalent), as of its latest successful scrape.",
		}, []string{"pool", "replica"})),
		scrapedRunning: registerOrReuse(reg, &errs, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "triage_upstream_scraped_running_requests",
			Help: "Requests the replica is running (vllm:num_requests_running or the engine's equivalent), as of its latest successful scrape.",
		}, []string{"pool", "replica"})),
		scrapedKV: registerOrReuse(reg, &errs, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "triage_upstream_scraped_kv_cache_usage_ratio",
			Help: "Fraction of the replica's KV cache in use, 0..1 (vllm:kv_cache_usage_perc or the engine's equivalent), as of its latest successful scrape. Absent for engines that export none.",
		}, []string{"pool", "replica"})),
		scrapeAge: registerOrReuse(reg, &errs, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "triage_upstream_scrape_age_seconds",
			Help: "Age of the replica's latest successful scrape, set at each scrape round (0 after a success; grows by one interval with each failed round). Absent until the first success.",
		}, []string{"pool", "replica"})),
		scrapeFailures: registerOrReuse(reg, &errs, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "triage_upstream_scrape_failures_total",
			Help: "Failed scrapes of the replica's /metrics: no answer, a non-2xx status, or a body without the engine's load gauges.",
		}, []string{"pool", "replica"})),
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("register upstream metrics: %w", err)
	}
	return m, nil
}

func registerOrReuse[C prometheus.Collector](reg prometheus.Registerer, errs *[]error, c C) C {
	err := reg.Register(c)
	if err == nil {
		return c
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing
		}
	}
	*errs = append(*errs, err)
	return c
}

// replicaMetrics are one replica's children, resolved once so the request
// path does no label lookups.
type replicaMetrics struct {
	inflight  prometheus.Gauge
	healthy   prometheus.Gauge
	ttfb      prometheus.Observer
	ttft      prometheus.Observer
	ejections prometheus.Counter
	outcomes  [numOutcomes]prometheus.Counter

	promptTokens, completionTokens prometheus.Counter
	unmetered                      prometheus.Counter

	scrapeFailures prometheus.Counter
	// The scraped signals and their age are resolved on the first successful scrape
	// (see scraped), so a replica never scraped has no series rather than zeros that
	// read like an idle replica. Only the scrape goroutine of the replica touches them.
	labels                          [2]string
	m                               *metrics
	waiting, running, kv, scrapeAge prometheus.Gauge
}

// scraped publishes a successful scrape's load signals. An engine without a
// KV-cache gauge has no KV series (it is unknown, not 0); one that stops
// exporting it loses the series.
func (rm *replicaMetrics) scraped(l *replicaLoad) {
	pool, replica := rm.labels[0], rm.labels[1]
	if rm.waiting == nil {
		rm.waiting = rm.m.scrapedWaiting.WithLabelValues(pool, replica)
		rm.running = rm.m.scrapedRunning.WithLabelValues(pool, replica)
		rm.scrapeAge = rm.m.scrapeAge.WithLabelValues(pool, replica)
	}
	rm.waiting.Set(float64(l.waiting))
	rm.running.Set(float64(l.running))
	switch {
	case l.kvOK && rm.kv == nil:
		rm.kv = rm.m.scrapedKV.WithLabelValues(pool, replica)
	case !l.kvOK && rm.kv != nil:
		rm.m.scrapedKV.DeleteLabelValues(pool, replica)
		rm.kv = nil
	}
	if rm.kv != nil {
		rm.kv.Set(l.kv)
	}
}

// scrapeAged sets the age of the latest successful scrape; a no-op before the first.
func (rm *replicaMetrics) scrapeAged(age time.Duration) {
	if rm.scrapeAge != nil {
		rm.scrapeAge.Set(age.Seconds())
	}
}

func (m *metrics) forReplica(pool, replica string) *replicaMetrics {
	rm := &replicaMetrics{
		inflight:  m.inflight.WithLabelValues(pool, replica),
		healthy:   m.healthy.WithLabelValues(pool, replica),
		ttfb:      m.ttfb.WithLabelValues(pool, replica),
		ttft:      m.ttft.WithLabelValues(pool, replica),
		ejections: m.ejections.WithLabelValues(pool, replica),

		promptTokens:     m.tokens.WithLabelValues(pool, replica, "prompt"),
		completionTokens: m.tokens.WithLabelValues(pool, replica, "completion"),
		unmetered:        m.unmetered.WithLabelValues(pool, replica),

		scrapeFailures: m.scrapeFailures.WithLabelValues(pool, replica),
		labels:         [2]string{pool, replica},
		m:              m,
	}
	for o := range numOutcomes {
		rm.outcomes[o] = m.requests.WithLabelValues(pool, replica, o.String())
	}
	return rm
}
