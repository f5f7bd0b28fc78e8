package policy

import "math"

// noteFallback marks the trace records of a signal policy that had no
// usable reading for some candidate and picked by least-request instead.
const noteFallback = "fallback"

// signalFunc reads one candidate's signal for a signal policy: its value,
// lower is better, and whether the candidate has a usable reading.
type signalFunc func(c *Candidate) (value float64, ok bool)

// pickLowest is the decision shared by the policies that rank replicas by
// one signal (least-kv-cache, least-utilization, least-busy-time,
// throughput, least-latency), after AIBrix's routers of the same names.
//
// When every candidate has a reading, the lowest value wins; ties go to the
// fewest InFlight, then round-robin among those still tied (rr), so equal
// replicas share the work instead of the first one taking it all.
//
// When any candidate has no reading (ok false, or a NaN value), the pick is
// least-request over all the candidates, and the trace notes "fallback".
// AIBrix instead ranks only the pods that have the metric, and picks at
// random when none has: that never sends a request to a replica whose
// /metrics is down or that has not been measured yet, so one such replica
// would get nothing while the others have readings. Comparing a reading with
// none can only starve the unmeasured replica or herd onto it; the
// gateway's own in-flight count is exact and always at hand.
//
// Traces score candidates by the signal (lower is better), or by InFlight
// after a fallback. t may be nil.
func pickLowest(cands []Candidate, signal signalFunc, rr *rotor, t *Tracer) int {
	for i := range cands {
		if v, ok := signal(&cands[i]); !ok || math.IsNaN(v) {
			chosen := leastInFlight(cands, rr)
			if t != nil {
				t.Record(cands, inFlightScores(nil, cands), chosen, true, noteFallback)
			}
			return chosen
		}
	}
	best, bestInFlight, count := math.Inf(1), 0, 0
	for i := range cands {
		v, _ := signal(&cands[i])
		switch n := cands[i].InFlight; {
		case count == 0 || v < best || (v == best && n < bestInFlight):
			best, bestInFlight, count = v, n, 1
		case v == best && n == bestInFlight:
			count++
		}
	}
	chosen := nthTied(len(cands), rr.turn(count), func(i int) bool {
		v, _ := signal(&cands[i])
		return v == best && cands[i].InFlight == bestInFlight
	})
	if t != nil {
		scores := make([]float64, len(cands))
		for i := range cands {
			scores[i], _ = signal(&cands[i])
		}
		t.Record(cands, scores, chosen, true, "")
	}
	return chosen
}
