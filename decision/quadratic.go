package decision

var _ Policy = (*Quadratic)(nil)

// Quadratic raises the slow-path threshold with the square of the slow pool's load (the
// original Triage design's second version, docs/sources.md): threshold = Base + Alpha·load². Slow iff
// P(slow) > threshold. The square keeps the threshold near Base under light load and tightens
// it quickly as the pool fills. Base is the idle threshold: equal to the model's cutoff (the
// default, 0.5, is the shipped model's) the idle decision is the model's label; below it more
// prompts go slow than the model labels slow.
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

// Decide implements Policy. The model's cutoff only names the reason of a fast decision:
// load_shedding when the model said slow, fast_model when it did not; budget_shedding when
// the load threshold let it through and the slow-share cap's floor did not.
func (q *Quadratic) Decide(s Score, st State) Decision {
	load := st.Load()
	d := Decision{Threshold: q.Threshold(load), Load: load}
	switch {
	case s.PSlow > d.Threshold:
		d.Slow, d.Reason = true, ReasonSlowGranted
	case s.ModelSlow():
		d.Reason = ReasonLoadShedding
	default:
		d.Reason = ReasonFastModel
	}
	d.applyShareCap(s, st)
	return d
}
