package policy

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRandom(t *testing.T) {
	cs := cands(0, 0, 0, 0)
	a := pickIDs(NewRandom(7), &Request{}, cs, 200)
	b := pickIDs(NewRandom(7), &Request{}, cs, 200)
	require.Equal(t, a, b, "same seed, same sequence")

	seen := map[string]int{}
	for _, id := range a {
		seen[id]++
	}
	require.Len(t, seen, 4, "200 picks reach all 4 candidates")
	for id, n := range seen {
		require.Greater(t, n, 20, id)
	}
	require.NotEqual(t, a, pickIDs(NewRandom(8), &Request{}, cs, 200))
}

func TestRandomUnseeded(t *testing.T) {
	p := NewRandom(0)
	for range 50 {
		i := p.Pick(&Request{}, cands(0, 0, 0))
		require.True(t, i >= 0 && i < 3)
	}
}
