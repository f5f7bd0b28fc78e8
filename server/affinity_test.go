package server

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

func TestResponseTableLRUAndTTL(t *testing.T) {
	m, err := newResponseMetrics(prometheus.NewRegistry())
	require.NoError(t, err)
	now := time.Unix(1_700_000_000, 0)
	tab := newLocalResponses(2, time.Minute, func() time.Time { return now }, m)
	ctx := context.Background()
	a, b := responseHome{"fast", "fast-0"}, responseHome{"slow", "slow-1"}

	tab.Put("r1", a)
	tab.Put("r2", b)
	got, ok := tab.Get(ctx, "r1") // r1 is now the most recently used
	require.True(t, ok)
	require.Equal(t, a, got)
	tab.Put("r3", a)
	_, ok = tab.Get(ctx, "r2")
	require.False(t, ok, "the least recently used went first")
	require.Equal(t, 1.0, value(m.evicted.WithLabelValues("capacity")))

	now = now.Add(2 * time.Minute)
	_, ok = tab.Get(ctx, "r1")
	require.False(t, ok, "expired after its TTL")
	require.Equal(t, 1.0, value(m.evicted.WithLabelValues("expired")))
	tab.Put("r4", b) // sweeps r3, expired too
	require.Equal(t, 2.0, value(m.evicted.WithLabelValues("expired")))
	require.Equal(t, 1.0, value(m.entries))

	tab.Delete("r4")
	_, ok = tab.Get(ctx, "r4")
	require.False(t, ok)
	require.Equal(t, 2.0, value(m.evicted.WithLabelValues("expired")), "a deletion is no eviction")
	require.Equal(t, 0.0, value(m.entries))
}

// mapShared is a SharedResponses in memory: the fleet's Redis as two gateways see it.
type mapShared struct {
	mu   sync.Mutex
	m    map[string]responseHome
	ttls []time.Duration
}

func (s *mapShared) Get(_ context.Context, id string) (string, string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.m[id]
	return h.Pool, h.Replica, ok
}

func (s *mapShared) Set(id, pool, replica string, ttl time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[id] = responseHome{pool, replica}
	s.ttls = append(s.ttls, ttl)
}

func (s *mapShared) Delete(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, id)
}

func TestTieredResponses(t *testing.T) {
	shared := &mapShared{m: map[string]responseHome{}}
	tier := func() *tieredResponses {
		m, err := newResponseMetrics(prometheus.NewRegistry())
		require.NoError(t, err)
		return &tieredResponses{local: newLocalResponses(10, time.Hour, nil, m), shared: shared, ttl: time.Hour}
	}
	a, b := tier(), tier()
	ctx := context.Background()
	a.Put("r1", responseHome{"fast", "fast-1"})
	require.Equal(t, []time.Duration{time.Hour}, shared.ttls, "written through with the table's TTL")
	h, ok := b.Get(ctx, "r1")
	require.True(t, ok, "found through the shared tier")
	require.Equal(t, responseHome{"fast", "fast-1"}, h)
	_, ok = b.local.Get(ctx, "r1")
	require.True(t, ok, "and kept locally")
	a.Delete("r1")
	_, ok = a.Get(ctx, "r1")
	require.False(t, ok)
}
