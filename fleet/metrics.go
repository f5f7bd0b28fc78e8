package fleet

import (
	"fmt"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are fleet mode's series; label values come from small fixed sets (operations,
// results).
type metrics struct {
	errors       *prometheus.CounterVec // op
	topups       *prometheus.CounterVec // result
	cache        *prometheus.CounterVec // result
	cacheDropped prometheus.Counter
	budget       atomic.Pointer[Budget] // set by NewBudget; read by the gauges
}

func newMetrics(reg prometheus.Registerer, c *Conn) (*metrics, error) {
	m := &metrics{
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "triage_fleet_errors_total",
			Help: "Failed Redis operations by operation (connect, ping, budget, cache_get, cache_set).",
		}, []string{"op"}),
		topups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "triage_fleet_budget_topups_total",
			Help: "Synchronous budget syncs made because this gateway's grant was used up, by result (ok, error, joined: waited for a sync already running).",
		}, []string{"result"}),
		cache: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "triage_fleet_cache_requests_total",
			Help: "Shared (second-tier) result-cache lookups by result (hit, miss, error).",
		}, []string{"result"}),
		cacheDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "triage_fleet_cache_writes_dropped_total",
			Help: "Results not written to the shared cache (queue full, Redis down, or a failed write).",
		}),
	}
	for _, r := range []string{"hit", "miss", "error"} {
		m.cache.WithLabelValues(r)
	}
	budget := func(f func(b *Budget) float64) func() float64 {
		return func() float64 {
			if b := m.budget.Load(); b != nil {
				return f(b)
			}
			return 0
		}
	}
	all := []prometheus.Collector{
		m.errors, m.topups, m.cache, m.cacheDropped,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "triage_fleet_up",
			Help: "1 while the fleet's Redis is reachable and this gateway uses the shared state; 0 while it serves on local state.",
		}, func() float64 {
			if c.Up() {
				return 1
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "triage_fleet_budget_grant",
			Help: "Slow-path slots this gateway may use now (its grant from the fleet's budget).",
		}, budget(func(b *Budget) float64 { _, l := b.Local(); return float64(l) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "triage_fleet_budget_local_active",
			Help: "Slow-path slots this gateway holds now (triage_slow_active is the fleet's, as this gateway sees it).",
		}, budget(func(b *Budget) float64 { a, _ := b.Local(); return float64(a) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "triage_fleet_gateways",
			Help: "Live gateways in the fleet at the last budget sync, this one included.",
		}, budget(func(b *Budget) float64 { return float64(b.live.Load()) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "triage_fleet_budget_sync_age_seconds",
			Help: "Time since the last successful budget sync: how old this gateway's view of the other gateways' load is (-1 before the first).",
		}, budget(func(b *Budget) float64 { return b.syncAge() })),
	}
	for _, col := range all {
		if err := reg.Register(col); err != nil {
			return nil, fmt.Errorf("fleet: register metrics: %w", err)
		}
	}
	return m, nil
}
