package sweep

import (
	"fmt"
	"strings"
)

// SeedRun is one sweep of a --seeds run: every policy on one trace seed.
type SeedRun struct {
	Seed    uint64         `json:"seed"`
	Results []PolicyResult `json:"results"`
}

// spread is the mean, min and max of one metric across seeds.
type spread struct{ mean, min, max float64 }

func spreadOf(v []float64) spread {
	if len(v) == 0 {
		return spread{}
	}
	s := spread{min: v[0], max: v[0]}
	for _, x := range v {
		s.mean += x
		s.min, s.max = min(s.min, x), max(s.max, x)
	}
	s.mean /= float64(len(v))
	return s
}

// seedsTable is the markdown table of each policy's spread across the
// seed runs (empty without --seeds): mean and min–max of TTFT mean, TTFT
// p99 and SLO attainment, in the first run's policy order.
func (r *PolicyReport) seedsTable() string {
	if len(r.SeedRuns) == 0 {
		return ""
	}
	seeds := make([]string, len(r.SeedRuns))
	for i, run := range r.SeedRuns {
		seeds[i] = fmt.Sprint(run.Seed)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n## Across trace seeds %s\n\nEach policy's mean (min–max) over the %d seeds; the table above is seed %s alone. "+
		"A gap between two policies smaller than their min–max ranges is within seed-to-seed noise.\n\n", strings.Join(seeds, ", "), len(seeds), seeds[0])
	fmt.Fprintf(&b, "| policy | TTFT mean ms | TTFT p99 ms | TTFT ≤ %s |\n|---|---|---|---|\n", r.Config.SLOTTFT)
	for _, p := range r.Results {
		var mean, p99, slo []float64
		for _, run := range r.SeedRuns {
			for _, x := range run.Results {
				if x.Policy == p.Policy {
					mean, p99, slo = append(mean, x.TTFT.Mean), append(p99, x.TTFT.P99), append(slo, 100*x.SLOAttainment)
				}
			}
		}
		m, q, s := spreadOf(mean), spreadOf(p99), spreadOf(slo)
		fmt.Fprintf(&b, "| %s | %.0f (%.0f–%.0f) | %.0f (%.0f–%.0f) | %.1f%% (%.1f–%.1f%%) |\n",
			p.Policy, m.mean, m.min, m.max, q.mean, q.min, q.max, s.mean, s.min, s.max)
	}
	return b.String()
}
