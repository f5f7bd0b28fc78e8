package report

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/triage-gw/triage/bench/stats"
)

// Millis formats milliseconds for tables: two decimals below 10 ms, none
// above, "n/a" for NaN.
func Millis(v float64) string {
	switch {
	case v != v: // NaN
		return "n/a"
	case v < 10:
		return fmt.Sprintf("%.2f ms", v)
	default:
		return fmt.Sprintf("%.0f ms", v)
	}
}

// P50P99 formats a summary's median and 99th percentile as "p50 / p99".
func P50P99(s stats.Summary) string { return Millis(s.P50) + " / " + Millis(s.P99) }

// Number formats v with prec decimals, "—" for NaN.
func Number(v float64, prec int) string {
	if math.IsNaN(v) {
		return "—"
	}
	return fmt.Sprintf("%.*f", prec, v)
}

// Verdict says whether a target was met: "met" or "missed".
func Verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "missed"
}

// Counts formats counts by key ("200: 901, 429: 13283"), keys sorted.
func Counts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s: %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// Finite returns v, or nil when v is NaN or infinite, so a value that was
// not measured becomes null in JSON (encoding/json rejects NaN).
func Finite(v float64) any {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return v
}
