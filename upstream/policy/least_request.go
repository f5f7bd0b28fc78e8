package policy

// LeastRequest picks the candidate with the fewest in-flight requests.
// Ties go round-robin among the tied candidates, never to the first one.
//
// Concurrency: lock-free; safe for concurrent Pick.
type LeastRequest struct {
	traced
	rr rotor
}

var _ Picker = (*LeastRequest)(nil)

// nameLeastRequest is the default policy (DefaultConfig).
const nameLeastRequest = "least-request"

func init() {
	register(nameLeastRequest, "", nil, func(noSettings, Env) (Picker, error) { return NewLeastRequest(), nil })
}

// NewLeastRequest returns a least-request picker.
func NewLeastRequest() *LeastRequest { return &LeastRequest{} }

// Pick implements Picker.
func (p *LeastRequest) Pick(_ *Request, cands []Candidate) int {
	i := leastInFlight(cands, &p.rr)
	if t := p.tracer; t != nil {
		t.Record(cands, inFlightScores(nil, cands), i, true, "")
	}
	return i
}

// leastInFlight returns the index of the least-loaded candidate, taking
// ties in turn from rr. Other policies use it as their fallback.
func leastInFlight(cands []Candidate, rr *rotor) int {
	lo, count := cands[0].InFlight, 0
	for _, c := range cands {
		switch {
		case c.InFlight < lo:
			lo, count = c.InFlight, 1
		case c.InFlight == lo:
			count++
		}
	}
	return nthTied(len(cands), rr.turn(count), func(i int) bool { return cands[i].InFlight == lo })
}
