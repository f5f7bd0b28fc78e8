package fleet

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/internal/redistest"
)

// A Responses id recorded by one gateway is found by another, expires with its TTL, and is
// gone for both once deleted; an id never stored is a miss.
func TestResponsesSharedAcrossGateways(t *testing.T) {
	r := redistest.Start(t)
	cfg := testFleetConfig(r.URL())
	var tables []*Responses
	for _, id := range []string{"g0", "g1"} {
		cfg.GatewayID = id
		f, err := New(cfg, 4, Options{Logger: slog.New(slog.DiscardHandler), Registerer: prometheus.NewRegistry()})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() { f.Run(ctx) })
		t.Cleanup(func() { cancel(); wg.Wait() })
		tables = append(tables, f.Responses)
	}
	g0, g1 := tables[0], tables[1]
	ctx := context.Background()

	g0.Set("resp_1", "fast", "fast-1", time.Minute)
	require.Eventually(t, func() bool { _, _, ok := g1.Get(ctx, "resp_1"); return ok }, 5*time.Second, time.Millisecond)
	pool, replica, ok := g1.Get(ctx, "resp_1")
	require.True(t, ok)
	require.Equal(t, []string{"fast", "fast-1"}, []string{pool, replica})
	_, _, ok = g1.Get(ctx, "resp_never")
	require.False(t, ok)
	_, _, ok = g1.Get(ctx, strings.Repeat("x", 1<<16))
	require.False(t, ok, "a long client id is hashed into a fixed-size key")

	g1.Delete("resp_1")
	require.Eventually(t, func() bool { _, _, ok := g0.Get(ctx, "resp_1"); return !ok }, 5*time.Second, time.Millisecond)

	g0.Set("resp_short", "slow", "slow-0", 50*time.Millisecond)
	require.Eventually(t, func() bool {
		ttl, err := r.Command("PTTL", g0.key("resp_short"))
		return err == nil && ttl != "-2" && ttl != "-1"
	}, 5*time.Second, time.Millisecond, "written with its TTL")
	require.Eventually(t, func() bool { _, _, ok := g1.Get(ctx, "resp_short"); return !ok }, 5*time.Second, time.Millisecond, "expired")
}
