package server

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the HTTP layer's own series (the router, batcher and pools register theirs).
// Label values come from small fixed sets: endpoint names and status codes.
type metrics struct {
	requests      *prometheus.CounterVec // endpoint, code
	routerLatency prometheus.Histogram   // arrival → decision
	inflight      prometheus.Gauge
	writeStalls   prometheus.Counter
	connsOpen     prometheus.Gauge
	connsRejected *prometheus.CounterVec // reason
	bodyTimeouts  prometheus.Counter
	clientGone    prometheus.Counter
	pasted        prometheus.Counter
}

// newMetrics builds the server's metrics and registers them, with the Go and process
// collectors, on reg.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "triage_requests_total",
			Help: "HTTP requests by endpoint and status code.",
		}, []string{"endpoint", "code"}),
		routerLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "triage_router_latency_seconds",
			Help: "Time from a request's arrival to its routing decision (the x-router-latency header).",
			// 100µs .. 1s: a cache hit decides in well under a millisecond, a miss waits for
			// its batch (tens of ms); beyond 1s lands in +Inf.
			Buckets: []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1},
		}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "triage_inflight_requests",
			Help: "Requests being handled, streaming responses included until their stream ends.",
		}),
		writeStalls: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "triage_client_write_stalls_total",
			Help: "Responses cut because one write to the client blocked longer than server.write_stall_timeout (a client that stopped reading).",
		}),
		connsOpen: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "triage_server_connections_open",
			Help: "Client connections open now, idle keep-alive ones included (bounded by server.max_connections).",
		}),
		connsRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "triage_server_connections_rejected_total",
			Help: "Client connections answered with an error and closed because a limit was reached (reason: max_connections, max_connections_per_ip).",
		}, []string{"reason"}),
		bodyTimeouts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "triage_server_body_read_timeouts_total",
			Help: "Requests answered 408 because their body did not arrive within server.read_timeout.",
		}),
		clientGone: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "triage_server_client_gone_total",
			Help: "Requests cancelled upstream because their client closed or reset its connection while they waited on a replica (answered 499).",
		}),
		pasted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "triage_pasted_documents_total",
			Help: "Texts read as a short instruction with a document pasted beside it as its context (server.split_pasted), counted as the request is read (a request pinned to a pool by its model is counted but not classified); /v1/classify items included.",
		}),
	}
	for _, r := range []string{"max_connections", "max_connections_per_ip"} {
		m.connsRejected.WithLabelValues(r)
	}
	all := []prometheus.Collector{
		m.requests, m.routerLatency, m.inflight, m.writeStalls, m.connsOpen, m.connsRejected, m.bodyTimeouts, m.clientGone,
		m.pasted,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	}
	for _, c := range all {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("server: register metrics: %w", err)
		}
	}
	return m, nil
}

// notePasted counts the texts read with a pasted document as their context.
func (m *metrics) notePasted(ins ...textInput) {
	for _, in := range ins {
		if in.pasted {
			m.pasted.Inc()
		}
	}
}
