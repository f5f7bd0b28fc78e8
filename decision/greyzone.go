package decision

import "math"

var _ Policy = (*GreyZone)(nil)

// GreyZone trusts the model's label except in an uncertain band around the cutoff, where the
// batcher's queue length decides (seed 003, main). It ignores slow-pool occupancy, which is why
// the seed replaced it; it is kept for comparison.
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

// Decide implements Policy. The reported threshold is always ModelCutoff.
func (g *GreyZone) Decide(pSlow float64, st State) Decision {
	load := st.Load()
	if math.IsNaN(pSlow) || pSlow < g.Low || pSlow > g.High {
		return modelDecision(pSlow, load)
	}
	switch {
	case st.QueueLen > g.HighQueue:
		return Decision{Slow: false, Reason: ReasonGreyZoneFast, Threshold: ModelCutoff, Load: load}
	case st.QueueLen < g.LowQueue:
		return Decision{Slow: true, Reason: ReasonGreyZoneSlow, Threshold: ModelCutoff, Load: load}
	}
	return modelDecision(pSlow, load)
}
