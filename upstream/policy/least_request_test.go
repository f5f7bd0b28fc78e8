package policy

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLeastRequest(t *testing.T) {
	tests := []struct {
		name     string
		inFlight []int
		picks    int
		want     []string
	}{
		{"fewest wins", []int{3, 1, 2}, 2, []string{"r1", "r1"}},
		{"fewest wins anywhere", []int{5, 4, 0}, 1, []string{"r2"}},
		{"three equal over three picks hit all", []int{0, 0, 0}, 3, []string{"r0", "r1", "r2"}},
		{"ties rotate among the tied only", []int{1, 4, 1, 9}, 4, []string{"r0", "r2", "r0", "r2"}},
		{"tie not at the front", []int{7, 2, 2}, 2, []string{"r1", "r2"}},
		{"single candidate", []int{42}, 2, []string{"r0", "r0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, pickIDs(NewLeastRequest(), &Request{}, cands(tt.inFlight...), tt.picks))
		})
	}
}

func TestLeastRequestTrace(t *testing.T) {
	p := withTracer(NewLeastRequest())
	p.Pick(&Request{}, cands(4, 1, 3))
	r := lastTrace(t, p)
	require.Equal(t, "r1", r.Chosen.ID)
	require.True(t, r.LowerIsBetter)
	require.Zero(t, r.Regret)
	require.Equal(t, []TraceCandidate{{"r1", 1, 1}, {"r2", 3, 3}, {"r0", 4, 4}}, r.Top)
}
