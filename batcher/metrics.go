package batcher

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	batchSize prometheus.Histogram
	queueWait prometheus.Histogram
	inference prometheus.Histogram
	depth     prometheus.Gauge
	rejected  prometheus.Counter
	dedup     prometheus.Counter
}

// newMetrics builds the batcher's metrics and registers them with reg unless reg is nil.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "triage_batcher_batch_size",
			Help:    "Distinct texts per classifier call.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64},
		}),
		queueWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "triage_batcher_queue_wait_seconds",
			Help:    "Time from a text's first Submit until its batch started.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 12), // 0.5ms .. ~1s
		}),
		inference: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "triage_batcher_inference_seconds",
			Help:    "Duration of one classifier call (one batch).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 12), // 1ms .. ~2s
		}),
		depth: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "triage_batcher_queue_depth",
			Help: "Distinct texts waiting for a batch.",
		}),
		rejected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "triage_batcher_rejected_total",
			Help: "Submits refused because the queue was full.",
		}),
		dedup: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "triage_batcher_dedup_total",
			Help: "Submits that joined an identical text already queued or running.",
		}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.batchSize, m.queueWait, m.inference, m.depth, m.rejected, m.dedup} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("batcher: register metrics: %w", err)
		}
	}
	return m, nil
}
