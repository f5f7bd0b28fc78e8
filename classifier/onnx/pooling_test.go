package onnx

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMeanPoolL2IgnoresPaddingAndNormalises(t *testing.T) {
	const dim = 3
	// Two real tokens, then padding that must not count.
	hidden := []float32{
		1, 2, 3,
		3, 2, 1,
		100, 100, 100,
	}
	dst := make([]float32, dim)
	meanPoolL2(dst, hidden, 2, dim)
	// mean = (2,2,2) → unit vector (1,1,1)/√3.
	for _, v := range dst {
		require.InDelta(t, 1/math.Sqrt(3), v, 1e-6)
	}
	var norm float64
	for _, v := range dst {
		norm += float64(v * v)
	}
	require.InDelta(t, 1, norm, 1e-6)

	zero := make([]float32, dim)
	meanPoolL2(zero, make([]float32, 2*dim), 2, dim)
	require.Equal(t, []float32{0, 0, 0}, zero, "a zero vector stays zero instead of NaN")
}

func TestGroupByLength(t *testing.T) {
	cases := []struct {
		name      string
		lens      []int
		waste     float64
		maxTokens int
		want      [][]int
	}{
		{"equal lengths form one group", []int{10, 10, 10}, 0.25, 4096, [][]int{{0, 1, 2}}},
		{"a long text does not pad short ones", []int{12, 300, 10, 11}, 0.25, 4096, [][]int{{2, 3, 0}, {1}}},
		{"token cap splits equal texts", []int{256, 256, 256}, 0.25, 512, [][]int{{0, 1}, {2}}},
		{"zero waste only groups identical lengths", []int{5, 6, 5}, 0, 4096, [][]int{{0, 2}, {1}}},
		{"single text", []int{7}, 0.25, 4096, [][]int{{0}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			order := make([]int, len(tc.lens))
			for i := range order {
				order[i] = i
			}
			// stable sort by length, as Classify does
			for i := 1; i < len(order); i++ {
				for j := i; j > 0 && tc.lens[order[j]] < tc.lens[order[j-1]]; j-- {
					order[j], order[j-1] = order[j-1], order[j]
				}
			}
			var got [][]int
			for _, g := range groupByLength(order, tc.lens, tc.waste, tc.maxTokens) {
				got = append(got, g.idx)
				mx := 0
				for _, k := range g.idx {
					mx = max(mx, tc.lens[k])
				}
				require.Equal(t, mx, g.maxLen)
			}
			require.Equal(t, tc.want, got)
		})
	}
}
