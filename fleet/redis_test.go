package fleet

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

func testFleetConfig(url string) Config {
	cfg := DefaultConfig()
	cfg.Enabled = true
	cfg.URL = url
	cfg.KeyPrefix = "test"
	cfg.CheckInterval = 50 * time.Millisecond
	cfg.CommandTimeout = 200 * time.Millisecond // -race on a busy 2-core machine
	cfg.Slots.SyncInterval = 20 * time.Millisecond
	cfg.Slots.LeaseTTL = time.Second
	return cfg
}

// gateway is one gateway's fleet parts, running until the test ends (or stop).
type gateway struct {
	conn   *Conn
	slots  *Slots
	cache  *Cache
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func joinFleet(t *testing.T, cfg Config, id string, max int) *gateway {
	t.Helper()
	cfg.GatewayID = id
	f, err := New(cfg, max, Options{Logger: slog.New(slog.DiscardHandler), Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	g := &gateway{conn: f.Conn, slots: f.Slots, cache: f.Cache}
	ctx, cancel := context.WithCancel(context.Background())
	g.cancel = cancel
	g.wg.Go(func() { f.Run(ctx) })
	t.Cleanup(g.stop)
	return g
}

// stop shuts the gateway down cleanly (its slots give its grant back).
func (g *gateway) stop() {
	g.cancel()
	g.wg.Wait()
}
