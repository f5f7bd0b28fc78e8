package fleet

import (
	"context"
	"fmt"
	"sync"
)

// Fleet is one gateway's membership of a fleet: the Redis connection, the fleet-wide
// slow slots, the shared result cache and replica affinity. Run owns their background work and stops it
// in order.
type Fleet struct {
	Conn  *Conn
	Slots *Slots
	// Cache is nil when fleet.cache.enabled is false.
	Cache *Cache
	// Affinity is nil when fleet.affinity.enabled is false. Attach the pools to it before
	// Run.
	Affinity *Affinity
	// Responses is the shared table of OpenAI Responses ids and their replicas.
	Responses *Responses
}

// New dials Redis (see Dial for when it fails and when it starts in local mode) and builds
// maxSlow slow slots for the whole fleet and, if enabled, the shared cache and
// affinity.
func New(cfg Config, maxSlow int, opts Options) (*Fleet, error) {
	conn, err := Dial(cfg, opts)
	if err != nil {
		return nil, err
	}
	b, err := NewSlots(conn, maxSlow)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("fleet: %w", err)
	}
	f := &Fleet{Conn: conn, Slots: b, Responses: NewResponses(conn)}
	if cfg.Cache.Enabled {
		f.Cache = NewCache(conn)
	}
	if cfg.Affinity.Enabled {
		f.Affinity = NewAffinity(conn)
	}
	return f, nil
}

// Run keeps the connection checked, the slots synced, the cache and the Responses table
// written and affinity shared until ctx ends; then it stops the slots first (which gives this gateway's grant
// back over the still open connection), the cache writer and affinity, then the connection.
// Run may be called once.
func (f *Fleet) Run(ctx context.Context) error {
	connCtx, stopConn := context.WithCancel(context.WithoutCancel(ctx))
	defer stopConn()
	var conn sync.WaitGroup
	conn.Go(func() { f.Conn.Run(connCtx) })
	var parts sync.WaitGroup
	parts.Go(func() { f.Slots.Run(ctx) })
	if f.Cache != nil {
		parts.Go(func() { f.Cache.Run(ctx) })
	}
	if f.Affinity != nil {
		parts.Go(func() { f.Affinity.Run(ctx) })
	}
	parts.Go(func() { f.Responses.Run(ctx) })
	parts.Wait()
	stopConn()
	conn.Wait()
	return nil
}
