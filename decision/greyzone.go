package decision

import "math"

var _ Policy = (*GreyZone)(nil)

// GreyZone trusts the model's label except in an uncertain band around the cutoff, where the
// batcher's queue length decides (the original Triage design's first version, see
// docs/sources.md). It ignores slow-pool occupancy, which is why that design replaced it; it
// is kept for comparison. The band should contain the model's cutoff (0.5 for the shipped
// model); outside it the label decides whatever the band.
//
// Build it with NewPolicy from a validated Config; the fields are exported for tests and tools.
type GreyZone struct {
	// Low and High bound the grey zone, both inclusive.
	Low, High float64
	// HighQueue: a queue longer than this sends grey-zone requests fast.
	HighQueue int
	// LowQueue: a queue shorter than this sends grey-zone requests slow.
	LowQueue int
}

// Decide implements Policy. The reported threshold is the model's cutoff, or the slow-share
// cap's floor when that is higher (a slow verdict at or below the floor goes fast as
// budget_shedding).
func (g *GreyZone) Decide(s Score, st State) Decision {
	load := st.Load()
	var d Decision
	switch {
	case math.IsNaN(s.PSlow) || s.PSlow < g.Low || s.PSlow > g.High,
		st.QueueLen >= g.LowQueue && st.QueueLen <= g.HighQueue:
		d = modelDecision(s, load)
	case st.QueueLen > g.HighQueue:
		d = Decision{Slow: false, Reason: ReasonGreyZoneFast, Threshold: s.Cutoff, Load: load}
	default: // st.QueueLen < g.LowQueue
		d = Decision{Slow: true, Reason: ReasonGreyZoneSlow, Threshold: s.Cutoff, Load: load}
	}
	d.applyShareCap(s, st)
	return d
}
