package policy

import "sync/atomic"

// rotor hands out turns for breaking ties round-robin, so that equal
// candidates share the work instead of the first one winning every time
// (first-seen tie-breaking, as in the agentic-KV-cache policy study that
// lmetric comes from, pins replica 0 whenever loads are equal). Safe for
// concurrent use.
type rotor struct{ n atomic.Uint64 }

// turn returns which of count tied candidates to take, in [0, count).
// It advances only when there is a real tie.
func (r *rotor) turn(count int) int {
	if count <= 1 {
		return 0
	}
	return int((r.n.Add(1) - 1) % uint64(count))
}

// nthTied returns the index i in [0, n) of the k-th (from 0) i for which
// tied(i) holds, or -1 when there are not that many.
func nthTied(n, k int, tied func(i int) bool) int {
	for i := range n {
		if tied(i) {
			if k == 0 {
				return i
			}
			k--
		}
	}
	return -1
}
