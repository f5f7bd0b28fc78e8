package server

import (
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
	a, b := responseHome{"fast", "fast-0"}, responseHome{"slow", "slow-1"}

	tab.Put("r1", a)
	tab.Put("r2", b)
	got, ok := tab.Get("r1") // r1 is now the most recently used
	require.True(t, ok)
	require.Equal(t, a, got)
	tab.Put("r3", a)
	_, ok = tab.Get("r2")
	require.False(t, ok, "the least recently used went first")
	require.Equal(t, 1.0, value(m.evicted.WithLabelValues("capacity")))

	now = now.Add(2 * time.Minute)
	_, ok = tab.Get("r1")
	require.False(t, ok, "expired after its TTL")
	require.Equal(t, 1.0, value(m.evicted.WithLabelValues("expired")))
	tab.Put("r4", b) // sweeps r3, expired too
	require.Equal(t, 2.0, value(m.evicted.WithLabelValues("expired")))
	require.Equal(t, 1.0, value(m.entries))

	tab.Delete("r4")
	_, ok = tab.Get("r4")
	require.False(t, ok)
	require.Equal(t, 2.0, value(m.evicted.WithLabelValues("expired")), "a deletion is no eviction")
	require.Equal(t, 0.0, value(m.entries))
}
