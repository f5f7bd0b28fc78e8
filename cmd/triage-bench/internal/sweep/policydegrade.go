package sweep

import (
	"fmt"
	"time"

	"github.com/triage-gw/triage/bench/stats"
)

// DegradeResult is one policy's outcome over the requests sent while
// replica 0 was slowed (degrading scenario): whether the policy moved work
// off the slow replica, and what that stretch cost its clients. The whole
// run's numbers dilute both with the full-speed stretches around it.
type DegradeResult struct {
	// Requests is how many requests were sent in the slow stretch, and
	// ToSlow how many of them went to replica 0.
	Requests int `json:"requests"`
	ToSlow   int `json:"to_slowed_replica"`
	// TTFT and SLOAttainment are as PolicyResult's, over those requests.
	TTFT          stats.Summary `json:"ttft"`
	SLOAttainment float64       `json:"slo_attainment"`
}

// tallyDegraded summarises the requests of out sent within d's slow stretch;
// slowID is the slowed replica's ID.
func tallyDegraded(out []RequestResult, d degradeSchedule, slowID string, sloTTFT time.Duration) *DegradeResult {
	var res DegradeResult
	var ttft []time.Duration
	for _, r := range out {
		if !r.wasSent || r.sent < d.From || r.sent >= d.Until {
			continue
		}
		res.Requests++
		if r.Replica == slowID {
			res.ToSlow++
		}
		if r.OK {
			ttft = append(ttft, r.Timing.TTFT)
		}
	}
	res.TTFT = stats.Summarize(ttft)
	res.SLOAttainment = sloAttainment(ttft, res.Requests, sloTTFT)
	return &res
}

// degradeCells are the slow-stretch columns of one table row.
func degradeCells(d *DegradeResult) string {
	if d == nil || d.Requests == 0 {
		return " — | — | — | — |"
	}
	return fmt.Sprintf(" %d / %d (%.0f%%) | %.0f | %.0f | %.1f%% |", d.ToSlow, d.Requests, 100*float64(d.ToSlow)/float64(d.Requests),
		d.TTFT.Mean, d.TTFT.P99, 100*d.SLOAttainment)
}
