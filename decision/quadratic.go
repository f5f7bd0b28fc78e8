package decision

var _ Policy = (*Quadratic)(nil)

// Quadratic raises the slow-path threshold with the square of the slow pool's load (seed 003,
// main2): threshold = Base + Alpha·load². Slow iff P(slow) > threshold. The square keeps the
// threshold near Base under light load and tightens it quickly as the pool fills.
//
// Build it with NewPolicy from a validated Config; the fields are exported for tests and tools.
type Quadratic struct {
	Base  float64
	Alpha float64
}

// Threshold returns Base + Alpha·load² for a load in [0, 1].
func (q *Quadratic) Threshold(load float64) float64 {
	return q.Base + q.Alpha*load*load
}

// Decide implements Policy.
func (q *Quadratic) Decide(pSlow float64, st State) Decision {
	load := st.Load()
	d := Decision{Threshold: q.Threshold(load), Load: load}
	switch {
	case pSlow > d.Threshold:
		d.Slow, d.Reason = true, ReasonSlowGranted
	case pSlow > ModelCutoff:
		d.Reason = ReasonLoadShedding
	default:
		d.Reason = ReasonFastModel
	}
	return d
}
