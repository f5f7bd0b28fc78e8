package policy

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func newTestLeastBusyTime(t *testing.T, clock *fakeClock) *LeastBusyTime {
	t.Helper()
	p, err := NewLeastBusyTime(LeastBusyTimeConfig{Window: 10 * time.Second}, clock.Now)
	require.NoError(t, err)
	return withTracer(p)
}

func TestLeastBusyTimeShare(t *testing.T) {
	clock := newFakeClock()
	p := newTestLeastBusyTime(t, clock)
	cs := cands(0, 0)
	req := &Request{}
	require.Equal(t, 0, p.Pick(req, cs), "both idle: the rotor starts at r0")

	// r0 busy for 10 s = one time constant: 1 − e^−1.
	clock.Advance(10 * time.Second)
	p.Done(req, "r0", 1)
	require.InDelta(t, 1-math.Exp(-1), p.BusyShare("r0"), 1e-12)
	require.Zero(t, p.BusyShare("r1"))

	// Idle for another 10 s: it decays by e^−1.
	clock.Advance(10 * time.Second)
	require.Equal(t, "r1", cs[p.Pick(&Request{}, cs)].ID, "r1 was never busy")
	require.InDelta(t, (1-math.Exp(-1))*math.Exp(-1), p.BusyShare("r0"), 1e-12)
	require.InDelta(t, (1-math.Exp(-1))*math.Exp(-1), traceScores(t, p)["r0"], 1e-12, "traced by the share")
}

func TestLeastBusyTimeOverlapsCountOnce(t *testing.T) {
	clock := newFakeClock()
	p := newTestLeastBusyTime(t, clock)
	one := []Candidate{{ID: "r0"}}
	a, b := &Request{}, &Request{}
	p.Pick(a, one)
	p.Pick(b, one)
	clock.Advance(5 * time.Second)
	p.Done(a, "r0", 1) // b still open: busy throughout
	clock.Advance(5 * time.Second)
	p.Done(b, "r0", 1)
	require.InDelta(t, 1-math.Exp(-1), p.BusyShare("r0"), 1e-12, "two overlapping requests keep it busy, not doubly busy")
	clock.Advance(10 * time.Second)
	p.Done(b, "r0", 1) // a repeated Done is ignored: nothing is open
	p.Pick(&Request{}, []Candidate{{ID: "r1"}})
	require.InDelta(t, (1-math.Exp(-1))*math.Exp(-1), p.BusyShare("r0"), 1e-12)
}

func TestLeastBusyTimeTies(t *testing.T) {
	clock := newFakeClock()
	t.Run("all idle: fewer in flight, then rotation", func(t *testing.T) {
		p := newTestLeastBusyTime(t, clock)
		cs := cands(3, 1, 1)
		require.Equal(t, []string{"r1", "r2", "r1"}, pickIDs(p, &Request{}, cs, 3))
	})
	t.Run("all busy throughout: acts as least-request", func(t *testing.T) {
		p := newTestLeastBusyTime(t, clock)
		cs := cands(0, 0)
		p.Pick(&Request{}, cs)
		p.Pick(&Request{}, cs)
		clock.Advance(time.Hour) // both shares reach 1 (to float precision)
		cs = cands(4, 2)
		require.Equal(t, "r1", cs[p.Pick(&Request{}, cs)].ID)
		require.Equal(t, 1.0, p.BusyShare("r0"))
	})
	t.Run("one candidate", func(t *testing.T) {
		p := newTestLeastBusyTime(t, clock)
		require.Equal(t, []string{"r0", "r0"}, pickIDs(p, &Request{}, cands(9), 2))
	})
}

// A replica never picked reads idle and wins, whatever its in-flight count
// says (in fleet mode that count includes other gateways' requests, which
// the share does not see): the signal is never missing, so there is no fallback.
func TestLeastBusyTimeNewReplicaFirst(t *testing.T) {
	clock := newFakeClock()
	p := newTestLeastBusyTime(t, clock)
	p.Pick(&Request{}, []Candidate{{ID: "r0"}})
	clock.Advance(time.Second)
	cs := []Candidate{{ID: "r0", InFlight: 1}, {ID: "new", InFlight: 3}}
	require.Equal(t, "new", cs[p.Pick(&Request{}, cs)].ID)
	require.Empty(t, lastTrace(t, p).Note)
}

func TestLeastBusyTimeConfig(t *testing.T) {
	require.NoError(t, DefaultLeastBusyTimeConfig().ValidateAt("p"))
	require.EqualError(t, LeastBusyTimeConfig{}.ValidateAt("p"), "p.window: must be in [1ms, 1h], got 0s")
}
