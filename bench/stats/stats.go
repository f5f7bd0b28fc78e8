package stats

import (
	"math"
	"slices"
	"time"
)

// Summary describes a sample of durations. Percentiles use the nearest-rank
// method on the sorted sample: the p-th percentile is the smallest value
// with at least p% of the sample at or below it, so it is always a value
// that was observed (p99 of 100 samples is the 99th smallest, of 50 samples
// the largest).
type Summary struct {
	N    int     `json:"n"`
	Mean float64 `json:"mean_ms"`
	P50  float64 `json:"p50_ms"`
	P90  float64 `json:"p90_ms"`
	P99  float64 `json:"p99_ms"`
	Max  float64 `json:"max_ms"`
}

// Summarize returns the summary of ds in milliseconds. It sorts a copy, so
// ds is left as it is. An empty sample gives a zero Summary.
func Summarize(ds []time.Duration) Summary {
	if len(ds) == 0 {
		return Summary{}
	}
	ms := make([]float64, len(ds))
	for i, d := range ds {
		ms[i] = float64(d) / float64(time.Millisecond)
	}
	return SummarizeFloats(ms)
}

// SummarizeFloats is Summarize for values already in milliseconds (or any
// unit: it only sorts and picks). It sorts xs in place.
func SummarizeFloats(xs []float64) Summary {
	if len(xs) == 0 {
		return Summary{}
	}
	slices.Sort(xs)
	var sum float64
	for _, x := range xs {
		sum += x
	}
	return Summary{
		N:    len(xs),
		Mean: sum / float64(len(xs)),
		P50:  Percentile(xs, 50),
		P90:  Percentile(xs, 90),
		P99:  Percentile(xs, 99),
		Max:  xs[len(xs)-1],
	}
}

// Percentile returns the nearest-rank p-th percentile (0 < p <= 100) of
// sorted, which must be sorted ascending. It returns NaN for an empty slice.
func Percentile(sorted []float64, p float64) float64 {
	n := len(sorted)
	if n == 0 {
		return math.NaN()
	}
	rank := int(math.Ceil(p / 100 * float64(n)))
	rank = min(max(rank, 1), n)
	return sorted[rank-1]
}

// JainIndex is Jain's fairness index of xs: (Σx)² / (n·Σx²). It is 1 when
// every value is equal and 1/n when one value holds everything. An empty or
// all-zero input gives 1 (nothing is unfairly shared).
func JainIndex(xs []float64) float64 {
	var sum, sq float64
	for _, x := range xs {
		sum += x
		sq += x * x
	}
	if len(xs) == 0 || sq == 0 {
		return 1
	}
	return sum * sum / (float64(len(xs)) * sq)
}

// MaxOverMean is the largest value divided by the mean: 1 for a perfectly
// even spread, n when one of n holds everything. 0 for an empty or all-zero
// input.
func MaxOverMean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var sum, hi float64
	for _, x := range xs {
		sum += x
		hi = max(hi, x)
	}
	if sum == 0 {
		return 0
	}
	return hi / (sum / float64(len(xs)))
}

// Mean returns the arithmetic mean of xs, 0 for none.
func Mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var sum float64
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs))
}
