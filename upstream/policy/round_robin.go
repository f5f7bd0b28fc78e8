package policy

// RoundRobin cycles through the candidates, ignoring load (a baseline).
// When the candidate list changes size the cycle continues from the same
// counter, so a replica may be skipped or repeated once.
//
// Concurrency: lock-free; safe for concurrent Pick.
type RoundRobin struct {
	traced
	rr rotor
}

var _ Picker = (*RoundRobin)(nil)

func init() {
	register("round-robin", "", nil, func(noSettings, Env) (Picker, error) { return NewRoundRobin(), nil })
}

// NewRoundRobin returns a round-robin picker.
func NewRoundRobin() *RoundRobin { return &RoundRobin{} }

// Pick implements Picker. Traces score candidates by InFlight (lower is
// better), so regret shows the load round-robin ignores.
func (p *RoundRobin) Pick(_ *Request, cands []Candidate) int {
	i := int((p.rr.n.Add(1) - 1) % uint64(len(cands)))
	if t := p.tracer; t != nil {
		t.Record(cands, inFlightScores(nil, cands), i, true, "")
	}
	return i
}
