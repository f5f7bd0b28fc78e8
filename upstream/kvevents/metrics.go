package kvevents

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Event types, the values of the type label.
const (
	typeStored  = "block_stored"
	typeRemoved = "block_removed"
	typeCleared = "all_blocks_cleared"
	typeUnknown = "unknown"
)

// Why blocks or messages were not indexed, the values of the reason label.
const (
	dropMessageSize = "message_size" // a message over max_message_bytes
	dropTokenCap    = "token_cap"    // a BlockStored over max_tokens_per_event
	dropOrphan      = "orphan"       // a block whose parent the index does not know
	dropCapacity    = "capacity"     // the oldest block, forgotten at max_blocks
	dropOtherMedium = "other_medium" // a block of a CPU or disk tier
	dropOtherGroup  = "other_group"  // a block of a KV-cache group other than 0
	dropPending     = "pending_full" // a pick's keys, at max_pending_blocks
)

// Why a policy used its own guess for a replica instead of the events, the
// values of the fallback metric's reason label.
const (
	fallbackDown    = "down"     // the stream has been down longer than stale_after
	fallbackSilent  = "silent"   // picked for new blocks, no event since, for longer than stale_after
	fallbackNoBlock = "no_block" // no block size known yet, or no tokens for the request
)

// metrics are the triage_upstream_kv_events_* series. Every label set is
// pool and replica plus, for some, a label from a fixed set above.
type metrics struct {
	received  *prometheus.CounterVec // pool, replica, type
	batches   *prometheus.CounterVec // pool, replica
	decodeErr *prometheus.CounterVec // pool, replica
	gaps      *prometheus.CounterVec // pool, replica
	missed    *prometheus.CounterVec // pool, replica
	restarts  *prometheus.CounterVec // pool, replica
	replayed  *prometheus.CounterVec // pool, replica
	dropped   *prometheus.CounterVec // pool, replica, reason
	blocks    *prometheus.GaugeVec   // pool, replica
	connected *prometheus.GaugeVec   // pool, replica
	lastEvent *prometheus.GaugeVec   // pool, replica: unix seconds
	fallbacks *prometheus.CounterVec // pool, replica, reason
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	var errs []error
	pr := []string{"pool", "replica"}
	counter := func(name, help string, extra ...string) *prometheus.CounterVec {
		return register(reg, &errs, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "triage_upstream_kv_events_" + name, Help: help}, append(pr, extra...)))
	}
	gauge := func(name, help string) *prometheus.GaugeVec {
		return register(reg, &errs, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "triage_upstream_kv_events_" + name, Help: help}, pr))
	}
	m := &metrics{
		received:  counter("received_total", "KV-cache events received from the replica's engine, by type.", "type"),
		batches:   counter("batches_total", "Event batches (ZMQ messages) received."),
		decodeErr: counter("decode_errors_total", "Messages or events that could not be decoded and were skipped."),
		gaps:      counter("sequence_gaps_total", "Times the batch sequence number jumped ahead and the replay socket (if any) did not fill the gap: batches were lost and the index may be stale."),
		missed:    counter("missed_batches_total", "Batches lost in sequence gaps that were not replayed."),
		replayed:  counter("replayed_batches_total", "Batches fetched from the engine's replay socket to fill sequence gaps."),
		restarts:  counter("restarts_total", "Times the sequence number went back (the engine restarted); the replica's index was cleared."),
		dropped:   counter("dropped_total", "Messages or blocks not indexed, by reason.", "reason"),
		blocks:    gauge("index_blocks", "Blocks in the replica's event-fed index."),
		connected: gauge("connected", "Publisher connections open for the replica."),
		lastEvent: gauge("last_event_timestamp_seconds", "Unix time of the latest batch received; age = time() - this."),
		fallbacks: counter("fallbacks_total", "Replica-candidates a prefix-aware policy scored from its own guess instead of the events, by reason.", "reason"),
	}
	return m, errors.Join(errs...)
}

// register registers c, or returns the collector already registered under
// its name, so that several pools can share one Registerer.
func register[C prometheus.Collector](reg prometheus.Registerer, errs *[]error, c C) C {
	err := reg.Register(c)
	if err == nil {
		return c
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing
		}
	}
	*errs = append(*errs, err)
	return c
}
