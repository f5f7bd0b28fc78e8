package upstream

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// The legs of a disaggregated request, the values of the leg label.
const (
	legPrefill = iota
	legDecode
	numLegs
)

var legNames = [numLegs]string{legPrefill: "prefill", legDecode: "decode"}

// How a leg ended, the values of triage_upstream_pd_legs_total's outcome label.
const (
	legOK        = iota // prefill: parameters in hand; decode: an answer passed on
	legError            // no connection, a broken or non-2xx prefill answer, a decode that failed
	legNoParams         // prefill answered 2xx without kv_transfer_params
	legDeadline         // prefill past disaggregation.leg_deadline
	legNoReplica        // no replica of the leg's role could take it
	legCanceled         // the caller went away
	numLegOutcomes
)

var legOutcomeNames = [numLegOutcomes]string{
	legOK: "ok", legError: "error", legNoParams: "no_params", legDeadline: "deadline",
	legNoReplica: "no_replica", legCanceled: "canceled",
}

// pdMetrics are one disaggregated pool's children of the triage_upstream_pd_*
// series, resolved once so the request path does no label lookups.
type pdMetrics struct {
	legs      [numLegs][numLegOutcomes]prometheus.Counter
	legTime   [numLegs]prometheus.Observer
	fallbacks map[FallbackReason]prometheus.Counter
}

// newPDMetrics registers the triage_upstream_pd_* series on reg (reusing those
// another pool registered) and resolves pool's children, all created at 0.
func newPDMetrics(reg prometheus.Registerer, pool string) (pdMetrics, error) {
	var errs []error
	legs := registerOrReuse(reg, &errs, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "triage_upstream_pd_legs_total",
		Help: "Legs of disaggregated requests (leg: prefill, decode) by how they ended (outcome: ok, error, no_params, deadline, no_replica, canceled).",
	}, []string{"pool", "leg", "outcome"}))
	fallbacks := registerOrReuse(reg, &errs, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "triage_upstream_pd_fallbacks_total",
		Help: "Requests of a disaggregated pool run whole on one decode or both replica instead, by reason (no_prefill_replica, prefill_error, prefill_no_params, prefill_deadline, decode_failed).",
	}, []string{"pool", "reason"}))
	legTime := registerOrReuse(reg, &errs, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "triage_upstream_pd_leg_seconds",
		Help:    "Leg latency of disaggregated requests: prefill, from sending it to holding its kv_transfer_params (or its failure); decode, from sending it to its response headers.",
		Buckets: prometheus.ExponentialBuckets(0.005, 2, 15), // 5ms .. ~82s
	}, []string{"pool", "leg"}))
	if err := errors.Join(errs...); err != nil {
		return pdMetrics{}, fmt.Errorf("register disaggregation metrics: %w", err)
	}
	m := pdMetrics{fallbacks: make(map[FallbackReason]prometheus.Counter, len(fallbackReasons))}
	for l := range numLegs {
		for o := range numLegOutcomes {
			m.legs[l][o] = legs.WithLabelValues(pool, legNames[l], legOutcomeNames[o])
		}
		m.legTime[l] = legTime.WithLabelValues(pool, legNames[l])
	}
	for _, r := range fallbackReasons {
		m.fallbacks[r] = fallbacks.WithLabelValues(pool, string(r))
	}
	return m, nil
}
