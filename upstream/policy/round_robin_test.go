package policy

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRoundRobin(t *testing.T) {
	p := NewRoundRobin()
	require.Equal(t, []string{"r0", "r1", "r2", "r0", "r1"}, pickIDs(p, &Request{}, cands(9, 0, 0), 5))
}

func TestRoundRobinTraceShowsRegret(t *testing.T) {
	p := withTracer(NewRoundRobin())
	p.Pick(&Request{}, cands(5, 0)) // r0 although r1 is idle
	r := lastTrace(t, p)
	require.Equal(t, "r0", r.Chosen.ID)
	require.Equal(t, 5.0, r.Regret)
}
