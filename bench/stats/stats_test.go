package stats

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPercentileNearestRank(t *testing.T) {
	hundred := make([]float64, 100)
	for i := range hundred {
		hundred[i] = float64(i + 1)
	}
	tests := []struct {
		name   string
		sorted []float64
		p      float64
		want   float64
	}{
		{"p50 of 1..100", hundred, 50, 50},
		{"p99 of 1..100", hundred, 99, 99},
		{"p100 of 1..100", hundred, 100, 100},
		{"p1 of 1..100", hundred, 1, 1},
		{"tiny p rounds up to the first", hundred, 0.001, 1},
		{"single value", []float64{7}, 99, 7},
		{"p50 of two is the lower", []float64{1, 2}, 50, 1},
		{"p99 of ten is the largest", []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 99, 10},
		{"p90 of ten is the ninth", []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 90, 9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, Percentile(tt.sorted, tt.p))
		})
	}
	require.True(t, math.IsNaN(Percentile(nil, 50)))
}

func TestSummarize(t *testing.T) {
	ds := []time.Duration{30 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond, 40 * time.Millisecond}
	s := Summarize(ds)
	require.Equal(t, Summary{N: 4, Mean: 25, P50: 20, P90: 40, P99: 40, Max: 40}, s)
	require.Equal(t, 30*time.Millisecond, ds[0], "input left unsorted")
	require.Equal(t, Summary{}, Summarize(nil))
}

func TestJainIndex(t *testing.T) {
	tests := []struct {
		name string
		xs   []float64
		want float64
	}{
		{"even", []float64{5, 5, 5, 5}, 1},
		{"one holds all", []float64{8, 0, 0, 0}, 0.25},
		{"half", []float64{1, 1, 0, 0}, 0.5},
		{"uneven", []float64{1, 2, 3}, 36.0 / 42.0},
		{"empty", nil, 1},
		{"all zero", []float64{0, 0}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.InDelta(t, tt.want, JainIndex(tt.xs), 1e-12)
		})
	}
}

func TestMaxOverMean(t *testing.T) {
	require.InDelta(t, 1.0, MaxOverMean([]float64{3, 3, 3}), 1e-12)
	require.InDelta(t, 4.0, MaxOverMean([]float64{4, 0, 0, 0}), 1e-12)
	require.InDelta(t, 1.5, MaxOverMean([]float64{3, 1, 2}), 1e-12)
	require.Equal(t, 0.0, MaxOverMean(nil))
	require.Equal(t, 0.0, MaxOverMean([]float64{0, 0}))
}
