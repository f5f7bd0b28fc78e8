package drills

import (
	"context"
	"os"
	"strings"
	"sync"
	"time"
)

// The drills.
const (
	drillKill  = "kill-gateway" // kill -9 the last gateway at a quarter of the run
	drillRedis = "redis-outage" // kill redis-server at a quarter, start it again at half
)

// drillResult is one drill: the budget load over the fleet with a fault in the middle.
type drillResult struct {
	Drill     string     `json:"drill"`
	Gateways  int        `json:"gateways"`
	Load      *loadTally `json:"load"`
	MaxSlow   int        `json:"max_slow_concurrency"`
	MaxActive int        `json:"max_active"`
	FaultAt   float64    `json:"fault_at_s"`
	RestartAt float64    `json:"restart_at_s,omitempty"`
	// FallbackS: fault → every gateway reports triage_fleet_up 0 (Redis drill).
	FallbackS float64 `json:"fallback_s,omitempty"`
	// RejoinS: restart → every gateway reports triage_fleet_up 1 (Redis drill).
	RejoinS float64 `json:"rejoin_s,omitempty"`
	// ReapedS: fault → the survivors count one gateway fewer (kill drill).
	ReapedS float64 `json:"reaped_s,omitempty"`
	// WholeS: fault → the gateways may use the whole budget again (their slots granted sum
	// to it) for good; 0 when the sum never fell short, -1 when it was short at the end.
	WholeS float64 `json:"whole_again_s"`
	// MinGrants is the fewest slots granted after the fault, summed over live gateways.
	MinGrants int `json:"min_grants_after_fault"`
	// LogLines counts the gateways' log lines about the fault and the recovery.
	LogLines map[string]int `json:"log_lines"`
	Timeline []window       `json:"timeline"`
	Polls    []slowPoll     `json:"-"` // every --poll; Timeline sums them up
}

// drill runs the budget load over a fresh fleet for drill-duration with the fault of kind.
func (e *fleetEnv) drill(ctx context.Context, y gatewayYAML, slow []*replica, kind string) (drillResult, error) {
	r := drillResult{Drill: kind, Gateways: y.mode.Gateways, MaxSlow: e.c.MaxSlow}
	set, err := e.start(ctx, y)
	if err != nil {
		return r, err
	}
	defer set.stop()
	texts, err := e.warmTexts(ctx, set, 64)
	if err != nil {
		return r, err
	}
	// Let the fleet settle: on a starved machine the warm-up's inference burst can delay a
	// gateway's Redis commands past their timeout, and a gateway that rejoins holds its grant
	// for one lease; a fault in that window would measure the warm-up, not the fault.
	if !sleepUntil(ctx, time.Now().Add(e.c.DrillSettle)) {
		return r, ctx.Err()
	}
	d := e.c.DrillDuration
	start := time.Now()
	stop := e.pollSlow(ctx, set, slow, true)
	var wg sync.WaitGroup
	var faultErr error
	wg.Go(func() { faultErr = e.fault(ctx, set, kind, start, d, &r) })
	r.Load = e.budgetLoad(ctx, newBalancer(set), texts, d)
	wg.Wait()
	r.Polls = stop()
	if faultErr != nil {
		return r, faultErr
	}
	r.analyze(d)
	r.Timeline = windows(r.Polls)
	r.LogLines = countLogLines(set, start, "falling back to local state", "using the fleet's shared state",
		"subscription lost", "fleet affinity: subscribed")
	e.printDrill(r)
	return r, nil
}

// fault kills the last gateway, or kills Redis and starts it again, at the drill's times.
func (e *fleetEnv) fault(ctx context.Context, set *fleetGateways, kind string, start time.Time, d time.Duration, r *drillResult) error {
	if !sleepUntil(ctx, start.Add(d/4)) {
		return ctx.Err()
	}
	r.FaultAt = time.Since(start).Seconds()
	if kind == drillKill {
		g := set.gws[len(set.gws)-1]
		g.Kill() // SIGKILL: no drain, no goodbye to Redis
		return nil
	}
	e.redis.kill()
	if !sleepUntil(ctx, start.Add(d/2)) {
		return ctx.Err()
	}
	r.RestartAt = time.Since(start).Seconds()
	return e.redis.start(ctx)
}

func sleepUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// analyze reads the times of the fault's effects from the polls taken while the load ran
// (its wind-down, when the clients stop, is left out). The polls' clock starts a moment
// after the drill's, which only makes the times below slightly longer.
func (r *drillResult) analyze(d time.Duration) {
	var polls []slowPoll
	for _, p := range r.Polls {
		if p.At <= d.Seconds() {
			polls = append(polls, p)
		}
	}
	r.MaxActive, _, _ = summarizePolls(polls)
	r.MinGrants = r.MaxSlow
	short := -1.0 // the last poll after the fault with fewer slots granted than the budget
	for _, p := range polls {
		if p.At <= r.FaultAt {
			continue
		}
		switch {
		case r.Drill == drillKill && r.ReapedS == 0 && p.Gateways == r.Gateways-1:
			r.ReapedS = p.At - r.FaultAt
		case r.Drill == drillRedis && r.FallbackS == 0 && p.Up == 0:
			r.FallbackS = p.At - r.FaultAt
		case r.Drill == drillRedis && p.At > r.RestartAt && r.RejoinS == 0 && p.Up == p.Live:
			r.RejoinS = p.At - r.RestartAt
		}
		if p.Grants < r.MaxSlow {
			short = p.At
			r.MinGrants = min(r.MinGrants, p.Grants)
		}
	}
	r.WholeS = 0
	if short >= 0 {
		r.WholeS = -1
		for _, p := range polls {
			if p.At > short {
				r.WholeS = p.At - r.FaultAt
				break
			}
		}
	}
}

// countLogLines counts, over the set's gateway logs, the lines logged from since on that
// contain each phrase. The gateways log JSON lines starting with their UTC time.
func countLogLines(set *fleetGateways, since time.Time, phrases ...string) map[string]int {
	out := map[string]int{}
	from := `{"time":"` + since.UTC().Format("2006-01-02T15:04:05.000000000Z")
	for _, g := range set.gws {
		b, err := os.ReadFile(g.LogPath)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if line < from {
				continue
			}
			for _, p := range phrases {
				if strings.Contains(line, p) {
					out[p]++
				}
			}
		}
	}
	return out
}
