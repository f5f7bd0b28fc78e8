package drills

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/triage-gw/triage/bench/load"
	"github.com/triage-gw/triage/bench/promtext"
	"github.com/triage-gw/triage/bench/stats"
	"github.com/triage-gw/triage/cmd/triage-bench/internal/gatewaybench"
)

// slowPoll is one poll of the gateways' and the slow replicas' /metrics.
type slowPoll struct {
	At       float64 `json:"t_s"`         // since the poll started
	Active   int     `json:"active"`      // slow requests held, summed over the gateways that answered
	Grants   int     `json:"grants"`      // slow slots the gateways may use (fleet mode: their grants)
	Up       int     `json:"fleet_up"`    // gateways that say Redis is up
	Live     int     `json:"live"`        // gateways that answered the poll
	Gateways int     `json:"gateways"`    // live gateways as the first answering gateway counts them
	Replicas int     `json:"at_replicas"` // slow replicas' running + waiting requests
	// SyncAges and SnapshotAges are each answering gateway's triage_fleet_budget_sync_age_seconds
	// and triage_fleet_affinity_snapshot_age_seconds in ms (fleet mode; negative ones, before a
	// first sync or snapshot, left out): how old its view of the other gateways' load is.
	SyncAges     []float64 `json:"-"`
	SnapshotAges []float64 `json:"-"`
}

// pollSlow scrapes every gateway and slow replica, all at once, every interval until stop,
// which returns the polls.
func (e *fleetEnv) pollSlow(ctx context.Context, set *fleetGateways, slow []*replica, fleet bool) (stop func() []slowPoll) {
	ctx, cancel := context.WithCancel(ctx)
	var polls []slowPoll
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		t := time.NewTicker(e.c.Poll)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			p := e.pollOnce(ctx, set, slow, fleet)
			p.At = time.Since(start).Seconds()
			polls = append(polls, p)
		}
	}()
	return func() []slowPoll { cancel(); <-done; return polls }
}

func (e *fleetEnv) pollOnce(ctx context.Context, set *fleetGateways, slow []*replica, fleet bool) slowPoll {
	gw := make([]promtext.Samples, len(set.gws))
	rep := make([]promtext.Samples, len(slow))
	var wg sync.WaitGroup
	for i, g := range set.gws {
		wg.Go(func() { gw[i], _ = promtext.Scrape(ctx, g.Client, g.Base+"/metrics") })
	}
	for i, r := range slow {
		wg.Go(func() { rep[i], _ = promtext.Scrape(ctx, e.client, r.url+"/metrics") })
	}
	wg.Wait()
	var p slowPoll
	for _, s := range gw {
		if s == nil {
			continue
		}
		p.Live++
		if !fleet {
			p.Active += int(s.Sum("triage_slow_active"))
			p.Grants += e.c.MaxSlow
			continue
		}
		p.Active += int(s.Sum("triage_fleet_budget_local_active"))
		p.Grants += int(s.Sum("triage_fleet_budget_grant"))
		p.Up += int(s.Sum("triage_fleet_up"))
		if age := s.Sum("triage_fleet_budget_sync_age_seconds"); age >= 0 {
			p.SyncAges = append(p.SyncAges, 1000*age)
		}
		if age := s.Sum("triage_fleet_affinity_snapshot_age_seconds"); age >= 0 {
			p.SnapshotAges = append(p.SnapshotAges, 1000*age)
		}
		if p.Gateways == 0 {
			p.Gateways = int(s.Sum("triage_fleet_gateways"))
		}
	}
	for _, s := range rep {
		p.Replicas += int(s.Sum("vllm:num_requests_running") + s.Sum("vllm:num_requests_waiting"))
	}
	return p
}

// budgetResult is (a) in one mode.
type budgetResult struct {
	Load        *loadTally `json:"load"`
	MaxSlow     int        `json:"max_slow_concurrency"`
	MaxActive   int        `json:"max_active"`  // the most slow requests held fleet-wide in any poll
	MeanActive  float64    `json:"mean_active"` // mean over the polls: how much of the budget was used
	MaxReplicas int        `json:"max_at_replicas"`
	Polls       int        `json:"polls"`
	// SyncAge and SnapshotAge summarise, over every poll and gateway (fleet mode), the age
	// of a gateway's last budget sync and of its freshest affinity snapshot, in ms: the
	// staleness of its view of the fleet's slow load and of the replicas' load.
	SyncAge     stats.Summary `json:"sync_age_ms"`
	SnapshotAge stats.Summary `json:"snapshot_age_ms"`
}

func summarizePolls(polls []slowPoll) (maxActive int, meanActive float64, maxReplicas int) {
	sum := 0
	for _, p := range polls {
		maxActive, maxReplicas = max(maxActive, p.Active), max(maxReplicas, p.Replicas)
		sum += p.Active
	}
	if len(polls) > 0 {
		meanActive = float64(sum) / float64(len(polls))
	}
	return maxActive, meanActive, maxReplicas
}

// measureBudget is (a): the budget load over the whole set while the polls sum what is held.
func (e *fleetEnv) measureBudget(ctx context.Context, set *fleetGateways, slow []*replica, texts []string, fleet bool) budgetResult {
	stop := e.pollSlow(ctx, set, slow, fleet)
	t := e.budgetLoad(ctx, newBalancer(set), texts, e.c.BudgetDuration)
	polls := stop()
	r := budgetResult{Load: t, MaxSlow: e.c.MaxSlow, Polls: len(polls)}
	r.MaxActive, r.MeanActive, r.MaxReplicas = summarizePolls(polls)
	var sync, snap []float64
	for _, p := range polls {
		sync, snap = append(sync, p.SyncAges...), append(snap, p.SnapshotAges...)
	}
	r.SyncAge, r.SnapshotAge = stats.SummarizeFloats(sync), stats.SummarizeFloats(snap)
	return r
}

// cacheResult is (b) in one mode.
type cacheResult struct {
	Requests   int     `json:"requests"`
	OK         int     `json:"ok"`
	Hits       int     `json:"hits"`
	SharedHits int     `json:"shared_hits"` // of which found in the fleet's shared tier
	HitRate    float64 `json:"hit_rate"`
	Ideal      float64 `json:"ideal_hit_rate"` // 1 − 1/repeats: every text missed once
	FirstError string  `json:"first_error,omitempty"`
}

// measureCache is (b): cache-texts new texts, each sent cache-repeats times in a shuffled
// order to /v1/classify over the gateways.
func (e *fleetEnv) measureCache(ctx context.Context, set *fleetGateways) cacheResult {
	texts := make([]string, e.c.CacheTexts)
	for i := range texts {
		texts[i] = e.texts.Take().Text
	}
	var order []int
	for range e.c.CacheRepeats {
		for i := range texts {
			order = append(order, i)
		}
	}
	rand.New(rand.NewPCG(e.c.Seed, 0x6361636865)).Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	b := newBalancer(set)
	var mu sync.Mutex
	r := cacheResult{Ideal: 1 - 1/float64(e.c.CacheRepeats)}
	load.ClosedLoop{Workers: e.c.CacheClients, Duration: time.Hour, Limit: len(order)}.Run(ctx, func(ctx context.Context, _ int, seq int64) load.Sample {
		body, _ := json.Marshal(map[string]string{"text": texts[order[seq]]})
		a := b.send(ctx, e.client, "/v1/classify", body, http.Header{}, false)
		var out struct {
			Results []struct {
				Cache     string `json:"cache"`
				CacheTier string `json:"cache_tier"`
			} `json:"results"`
		}
		mu.Lock()
		defer mu.Unlock()
		r.Requests++
		if err := json.Unmarshal(a.body, &out); !a.ok() || err != nil || len(out.Results) != 1 {
			if r.FirstError == "" {
				r.FirstError = fmt.Sprintf("%s %v", a.err, err)
			}
			return load.Sample{}
		}
		r.OK++
		if out.Results[0].Cache == "hit" {
			r.Hits++
			if out.Results[0].CacheTier == "shared" {
				r.SharedHits++
			}
		}
		return load.Sample{}
	})
	if r.OK > 0 {
		r.HitRate = float64(r.Hits) / float64(r.OK)
	}
	return r
}

// latencyResult is (d) in one mode: proxy-cost's measure, and what gateway 0 did in fleet
// mode meanwhile.
type latencyResult struct {
	gatewaybench.ProxyLevel
	Topups float64 `json:"budget_topups"`   // synchronous budget syncs on the request path
	Picks  float64 `json:"picks_published"` // picks shared with the other gateways
}

// measureLatency is (d): workers alternate a streaming request direct to the first slow
// replica and the same request through gateway 0 (proxy-cost's method); the request carries
// a 6,000-character system prompt, so in fleet mode its pick is hashed and published.
func (e *fleetEnv) measureLatency(ctx context.Context, set *fleetGateways, slow []*replica, text string) (latencyResult, error) {
	system := ""
	for len(system) < 6000 {
		system += "You are the support desk's assistant. Answer in one sentence and cite the manual. "
	}
	body := chatStream(system, text, 2)
	urls := [2]string{slow[0].url + "/v1/chat/completions", set.gws[0].Base + "/v1/chat/completions"}
	m0, err := set.gws[0].Metrics(ctx)
	if err != nil {
		return latencyResult{}, err
	}
	lv, err := gatewaybench.MeasureProxyCost(ctx, e.c.RequestTimeout, urls, body, e.c.LatencyClients, e.c.LatencyTime)
	if err != nil {
		return latencyResult{}, err
	}
	m1, err := set.gws[0].Metrics(ctx)
	if err != nil {
		return latencyResult{}, err
	}
	delta := func(name string) float64 { return m1.Sum(name) - m0.Sum(name) }
	return latencyResult{ProxyLevel: lv, Topups: delta("triage_fleet_budget_topups_total"),
		Picks: delta("triage_fleet_affinity_picks_published_total")}, nil
}

// modeResult is (a), (b) and (d) in one mode.
type modeResult struct {
	Mode    fleetMode     `json:"mode"`
	Latency latencyResult `json:"latency"`
	Cache   cacheResult   `json:"cache"`
	Budget  budgetResult  `json:"budget"`
}

// budgetRun starts the mode's gateways and runs (d), (b) and (a) on them, or (d) alone.
func (e *fleetEnv) budgetRun(ctx context.Context, y gatewayYAML, slow []*replica, latencyOnly bool) (modeResult, error) {
	res := modeResult{Mode: y.mode}
	set, err := e.start(ctx, y)
	if err != nil {
		return res, err
	}
	defer set.stop()
	texts, err := e.warmTexts(ctx, set, 64)
	if err != nil {
		return res, err
	}
	if res.Latency, err = e.measureLatency(ctx, set, slow, texts[0]); err != nil {
		return res, err
	}
	fmt.Fprintf(e.stderr, "    (d) added TTFT p50 %.2f ms, p99 %.2f ms (%.0f budget top-ups, %.0f picks published)\n",
		res.Latency.AddedP50, res.Latency.AddedP99, res.Latency.Topups, res.Latency.Picks)
	if latencyOnly {
		return res, set.stop()
	}
	res.Cache = e.measureCache(ctx, set)
	fmt.Fprintf(e.stderr, "    (b) hit rate %.1f%% (%d shared of %d hits, %d ok)\n", 100*res.Cache.HitRate, res.Cache.SharedHits, res.Cache.Hits, res.Cache.OK)
	res.Budget = e.measureBudget(ctx, set, slow, texts, y.mode.Fleet)
	b := res.Budget
	fmt.Fprintf(e.stderr, "    (a) max slow in flight %d of %d (mean %.1f, at replicas max %d), %d requests, %d failed\n",
		b.MaxActive, b.MaxSlow, b.MeanActive, b.MaxReplicas, b.Load.Requests, b.Load.FailedOther+b.Load.FailedStreaming)
	return res, set.stop()
}
