package server

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the HTTP layer's own series. Label values come from small fixed sets:
// endpoint names, status codes, paths, decision reasons, model versions.
type metrics struct {
	requests      *prometheus.CounterVec // endpoint, code
	decisions     *prometheus.CounterVec // path, reason
	routerLatency prometheus.Histogram   // arrival → decision
	cacheRequests *prometheus.CounterVec // result
	modelInfo     *prometheus.GaugeVec   // version
	reloads       *prometheus.CounterVec // result
	inflight      prometheus.Gauge
}

// gaugeFuncs are read at scrape time from live state.
type gaugeFuncs struct {
	slowActive func() float64
	slowLoad   func() float64
	threshold  func() float64
	evictions  func() float64
}

// newMetrics builds the server's metrics and registers them, with the Go and process
// collectors, on reg.
func newMetrics(reg prometheus.Registerer, f gaugeFuncs) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "triage_requests_total",
			Help: "HTTP requests by endpoint and status code.",
		}, []string{"endpoint", "code"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "triage_decisions_total",
			Help: "Routing decisions of executed requests (query-process and the OpenAI endpoints) by path and reason.",
		}, []string{"path", "reason"}),
		routerLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "triage_router_latency_seconds",
			Help: "Time from a request's arrival to its routing decision (the x-router-latency header).",
			// 100µs .. 1s: a cache hit decides in well under a millisecond, a miss waits for
			// its batch (tens of ms); beyond 1s lands in +Inf.
			Buckets: []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1},
		}),
		cacheRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "triage_cache_requests_total",
			Help: "Result-cache lookups by result (hit or miss).",
		}, []string{"result"}),
		modelInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "triage_model_info",
			Help: "1 for the classifier model version currently serving.",
		}, []string{"version"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "triage_model_reloads_total",
			Help: "Model reload attempts by result (ok or error).",
		}, []string{"result"}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "triage_inflight_requests",
			Help: "Requests being handled, streaming responses included until their stream ends.",
		}),
	}
	m.cacheRequests.WithLabelValues("hit")
	m.cacheRequests.WithLabelValues("miss")
	m.reloads.WithLabelValues("ok")
	m.reloads.WithLabelValues("error")
	funcs := []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "triage_slow_active",
			Help: "Requests holding the slow-path semaphore.",
		}, f.slowActive),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "triage_slow_load",
			Help: "Slow-path load: slow_active / decision.max_slow_concurrency, in [0, 1].",
		}, f.slowLoad),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "triage_decision_threshold",
			Help: "The P(slow) a request must exceed to go slow at the current load.",
		}, f.threshold),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "triage_cache_evictions_total",
			Help: "Entries evicted from the result cache (ristretto's count).",
		}, f.evictions),
	}
	all := append([]prometheus.Collector{
		m.requests, m.decisions, m.routerLatency, m.cacheRequests, m.modelInfo, m.reloads, m.inflight,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	}, funcs...)
	for _, c := range all {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("server: register metrics: %w", err)
		}
	}
	return m, nil
}

// setModel makes version the only one reported by triage_model_info.
func (m *metrics) setModel(version string) {
	m.modelInfo.Reset()
	m.modelInfo.WithLabelValues(version).Set(1)
}
