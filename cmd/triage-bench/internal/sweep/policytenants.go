package sweep

import (
	"time"

	"github.com/triage-gw/triage/bench/stats"
	"github.com/triage-gw/triage/bench/trace"
)

// TenantResults is one policy's outcome split between the trace's heavy
// user and the light users, what fairness policies are judged on: a fair
// policy keeps the light users' TTFT low however much the heavy one sends.
type TenantResults struct {
	Heavy TenantResult `json:"heavy_user"`
	Light TenantResult `json:"light_users"`
}

// TenantResult is the outcome of one group of users' requests.
type TenantResult struct {
	Requests int           `json:"requests"`
	OK       int           `json:"ok"`
	TTFT     stats.Summary `json:"ttft"`
	// SLOAttainment is as PolicyResult's, over this group's requests.
	SLOAttainment float64 `json:"slo_attainment"`
}

// tallyTenants splits out, the results of reqs in the same order, between
// trace.HeavyUser and everyone else.
func tallyTenants(out []RequestResult, reqs []PreparedRequest, sloTTFT time.Duration) *TenantResults {
	var ttft [2][]time.Duration // 0: heavy user, 1: light users
	var res [2]TenantResult
	for i, r := range out {
		g := 1
		if reqs[i].Trace.User == trace.HeavyUser {
			g = 0
		}
		res[g].Requests++
		if r.OK {
			res[g].OK++
			ttft[g] = append(ttft[g], r.Timing.TTFT)
		}
	}
	for g := range res {
		res[g].TTFT = stats.Summarize(ttft[g])
		res[g].SLOAttainment = sloAttainment(ttft[g], res[g].Requests, sloTTFT)
	}
	return &TenantResults{Heavy: res[0], Light: res[1]}
}
