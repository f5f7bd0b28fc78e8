package fleet

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are fleet mode's series; label values come from small fixed sets (operations,
// results).
type metrics struct {
	errors       *prometheus.CounterVec // op
	topups       *prometheus.CounterVec // result
	cache        *prometheus.CounterVec // result
	cacheDropped prometheus.Counter
	slots        atomic.Pointer[Slots] // set by NewSlots; read by the gauges

	affMessages      *prometheus.CounterVec // direction, kind
	affBytes         prometheus.Counter
	affPicksSent     prometheus.Counter
	affPicksDropped  *prometheus.CounterVec   // reason
	affPicksReceived *prometheus.CounterVec   // result
	affIgnored       *prometheus.CounterVec   // reason
	affinity         atomic.Pointer[Affinity] // set by NewAffinity; read by the gauges
}

func newMetrics(reg prometheus.Registerer, c *Conn) (*metrics, error) {
	m := &metrics{
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "triage_fleet_errors_total",
			Help: "Failed Redis operations by operation (connect, ping, budget, cache_get, cache_set, responses_get, responses_set; responses_set also counts Responses-table writes dropped because the queue was full or Redis down).",
		}, []string{"op"}),
		topups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "triage_fleet_budget_topups_total",
			Help: "Synchronous slot syncs made because this gateway's grant was used up, by result (ok, error, joined: waited for a sync already running).",
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
	m.newAffinityMetrics()
	slotsGauge := func(f func(b *Slots) float64) func() float64 {
		return func() float64 {
			if b := m.slots.Load(); b != nil {
				return f(b)
			}
			return 0
		}
	}
	all := []prometheus.Collector{
		m.errors, m.topups, m.cache, m.cacheDropped,
		m.affMessages, m.affBytes, m.affPicksSent, m.affPicksDropped, m.affPicksReceived, m.affIgnored,
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
			Help: "Slow-path slots this gateway may use now (its grant of the fleet's slow slots).",
		}, slotsGauge(func(b *Slots) float64 { _, l := b.Local(); return float64(l) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "triage_fleet_budget_local_active",
			Help: "Slow-path slots this gateway holds now (triage_slow_active is the fleet's, as this gateway sees it).",
		}, slotsGauge(func(b *Slots) float64 { a, _ := b.Local(); return float64(a) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "triage_fleet_gateways",
			Help: "Live gateways in the fleet at the last slot sync, this one included.",
		}, slotsGauge(func(b *Slots) float64 { return float64(b.live.Load()) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "triage_fleet_budget_sync_age_seconds",
			Help: "Time since the last successful slot sync: how old this gateway's view of the other gateways' load is (-1 before the first).",
		}, slotsGauge(func(b *Slots) float64 { return b.syncAge() })),
	}
	all = append(all, m.affinityGauges()...)
	for _, col := range all {
		if err := reg.Register(col); err != nil {
			return nil, fmt.Errorf("fleet: register metrics: %w", err)
		}
	}
	return m, nil
}

// newAffinityMetrics makes the affinity counters, each label value from a fixed set.
func (m *metrics) newAffinityMetrics() {
	m.affMessages = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "triage_fleet_affinity_messages_total",
		Help: "Affinity pub/sub messages by direction (sent, received: from other gateways, applied) and kind (picks, load).",
	}, []string{"direction", "kind"})
	m.affBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "triage_fleet_affinity_sent_bytes_total",
		Help: "Bytes of affinity messages published (picks and load snapshots).",
	})
	m.affPicksSent = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "triage_fleet_affinity_picks_published_total",
		Help: "Picks of this gateway's prefix-aware policies published to the other gateways.",
	})
	m.affPicksDropped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "triage_fleet_affinity_picks_dropped_total",
		Help: "Picks not published, by reason (queue_full, redis_down, publish_error); the other gateways route those conversations on their own state.",
	}, []string{"reason"})
	m.affPicksReceived = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "triage_fleet_affinity_picks_received_total",
		Help: "Other gateways' picks received, by result (applied to this gateway's policy, or ignored: a policy that learns nothing from it, another block size, a replica this gateway does not have).",
	}, []string{"result"})
	m.affIgnored = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "triage_fleet_affinity_messages_ignored_total",
		Help: "Affinity messages not applied, by reason (own: this gateway's, malformed, unknown_pool, inbox_full).",
	}, []string{"reason"})
	for _, d := range []string{"sent", "received"} {
		for _, k := range []string{"picks", "load"} {
			m.affMessages.WithLabelValues(d, k)
		}
	}
	for _, r := range []string{"queue_full", "redis_down", "publish_error"} {
		m.affPicksDropped.WithLabelValues(r)
	}
	for _, r := range []string{"applied", "ignored"} {
		m.affPicksReceived.WithLabelValues(r)
	}
	for _, r := range []string{"own", "malformed", "unknown_pool", "inbox_full"} {
		m.affIgnored.WithLabelValues(r)
	}
}

// affinityGauges read the running Affinity, if any.
func (m *metrics) affinityGauges() []prometheus.Collector {
	read := func(f func(a *Affinity) float64, none float64) func() float64 {
		return func() float64 {
			if a := m.affinity.Load(); a != nil {
				return f(a)
			}
			return none
		}
	}
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "triage_fleet_affinity_subscribed",
			Help: "1 while this gateway receives the other gateways' picks and load; 0 while it routes on local state only.",
		}, read(func(a *Affinity) float64 {
			if a.subscribed.Load() {
				return 1
			}
			return 0
		}, 0)),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "triage_fleet_affinity_peers",
			Help: "Other gateways whose in-flight snapshot is live (heard from within fleet.affinity.load_expiry).",
		}, read(func(a *Affinity) float64 { n, _ := a.freshest(time.Now()); return float64(n) }, 0)),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "triage_fleet_affinity_snapshot_age_seconds",
			Help: "Age of the freshest in-flight snapshot from another gateway: how stale the fleet part of the replicas' load is (-1 when there is none).",
		}, read(func(a *Affinity) float64 { _, age := a.freshest(time.Now()); return age }, -1)),
	}
}
