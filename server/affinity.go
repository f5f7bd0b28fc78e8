package server

import (
	"container/list"
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// responseHome is where an OpenAI Responses id lives: the pool and replica that stored it.
// vLLM keeps stored responses in the memory of the replica that produced them, so
// previous_response_id, GET and DELETE must reach that replica and no other.
type responseHome struct {
	Pool, Replica string
}

// responseTable remembers each Responses id's home. It is lossy by design: an entry may be
// forgotten (capacity, age), after which the conversation cannot be continued through the
// gateway and the client is told so (404 naming the id).
type responseTable interface {
	// Get returns id's home and refreshes its age.
	Get(ctx context.Context, id string) (responseHome, bool)
	// Put records id's home; it may evict another entry.
	Put(id string, home responseHome)
	// Delete forgets id.
	Delete(id string)
}

var (
	_ responseTable = (*localResponses)(nil)
	_ responseTable = (*tieredResponses)(nil)
)

// localResponses is the table of one gateway: an LRU capped at max entries whose entries
// also expire ttl after their last use. In fleet mode it is the first tier of
// tieredResponses.
//
// Concurrency: every method takes mu; nothing blocks under it.
type localResponses struct {
	max     int
	ttl     time.Duration
	now     func() time.Time
	evicted *prometheus.CounterVec // reason: capacity, expired
	entries prometheus.Gauge

	mu    sync.Mutex
	byID  map[string]*list.Element
	order *list.List // of *responseEntry, most recently used first
}

type responseEntry struct {
	id   string
	home responseHome
	used time.Time
}

// newLocalResponses builds the table; now nil means time.Now.
func newLocalResponses(max int, ttl time.Duration, now func() time.Time, m *responseMetrics) *localResponses {
	if now == nil {
		now = time.Now
	}
	return &localResponses{max: max, ttl: ttl, now: now, evicted: m.evicted, entries: m.entries,
		byID: make(map[string]*list.Element), order: list.New()}
}

func (t *localResponses) Get(_ context.Context, id string) (responseHome, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.byID[id]
	if !ok {
		return responseHome{}, false
	}
	ent := e.Value.(*responseEntry)
	now := t.now()
	if now.Sub(ent.used) > t.ttl {
		t.removeLocked(e, "expired")
		return responseHome{}, false
	}
	ent.used = now
	t.order.MoveToFront(e)
	return ent.home, true
}

func (t *localResponses) Put(id string, home responseHome) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	if e, ok := t.byID[id]; ok {
		ent := e.Value.(*responseEntry)
		ent.home, ent.used = home, now
		t.order.MoveToFront(e)
		return
	}
	t.byID[id] = t.order.PushFront(&responseEntry{id: id, home: home, used: now})
	// Expired entries go first (oldest at the back), then the least recently used over max.
	for e := t.order.Back(); e != nil && now.Sub(e.Value.(*responseEntry).used) > t.ttl; e = t.order.Back() {
		t.removeLocked(e, "expired")
	}
	for t.order.Len() > t.max {
		t.removeLocked(t.order.Back(), "capacity")
	}
	t.entries.Set(float64(t.order.Len()))
}

func (t *localResponses) Delete(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.byID[id]; ok {
		t.removeLocked(e, "")
	}
}

// removeLocked drops e, counting it as evicted for reason ("" for a deletion).
func (t *localResponses) removeLocked(e *list.Element, reason string) {
	t.order.Remove(e)
	delete(t.byID, e.Value.(*responseEntry).id)
	if reason != "" {
		t.evicted.WithLabelValues(reason).Inc()
	}
	t.entries.Set(float64(t.order.Len()))
}

type responseMetrics struct {
	evicted *prometheus.CounterVec
	entries prometheus.Gauge
}

func newResponseMetrics(reg prometheus.Registerer) (*responseMetrics, error) {
	m := &responseMetrics{
		evicted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "triage_responses_affinity_evictions_total",
			Help: "Responses ids forgotten by the affinity table before their deletion, by reason: capacity (server.response_affinity_entries), expired (server.response_affinity_ttl). A continuation of a forgotten id is answered 404.",
		}, []string{"reason"}),
		entries: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "triage_responses_affinity_entries",
			Help: "Responses ids whose replica the gateway remembers.",
		}),
	}
	for _, r := range []string{"capacity", "expired"} {
		m.evicted.WithLabelValues(r)
	}
	for _, c := range []prometheus.Collector{m.evicted, m.entries} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// SharedResponses is the fleet-wide tier of the Responses table (fleet.Responses): what one
// gateway records, the others find. It is lossy: Get may miss, Set and Delete may drop.
type SharedResponses interface {
	Get(ctx context.Context, id string) (pool, replica string, ok bool)
	Set(id, pool, replica string, ttl time.Duration)
	Delete(id string)
}

// tieredResponses is the table in fleet mode: the gateway's own table first, the fleet's on
// a miss (a hit there is kept locally too); records and deletions go to both.
type tieredResponses struct {
	local  *localResponses
	shared SharedResponses
	ttl    time.Duration
}

func (t *tieredResponses) Get(ctx context.Context, id string) (responseHome, bool) {
	if h, ok := t.local.Get(ctx, id); ok {
		return h, true
	}
	pool, replica, ok := t.shared.Get(ctx, id)
	if !ok {
		return responseHome{}, false
	}
	h := responseHome{Pool: pool, Replica: replica}
	t.local.Put(id, h)
	return h, true
}

func (t *tieredResponses) Put(id string, home responseHome) {
	t.local.Put(id, home)
	t.shared.Set(id, home.Pool, home.Replica, t.ttl)
}

func (t *tieredResponses) Delete(id string) {
	t.local.Delete(id)
	t.shared.Delete(id)
}
