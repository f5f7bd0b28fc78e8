package sim

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Finish reasons, the values of the finished_reason label.
const (
	finishStop   = "stop"
	finishLength = "length"
	finishAbort  = "abort" // client gone, stream cut, or server closed
)

// Rejection reasons, the values of the reason label.
const (
	rejectBadRequest = "bad_request"
	rejectQueueFull  = "queue_full"
	rejectInjected   = "injected_error"
	rejectClosed     = "closed"
)

// metrics uses vLLM's names, so that anything that scrapes vLLM (the
// gateway's load signals, dashboards) reads the simulator unchanged. The
// few without a vLLM counterpart are prefixed mockllm_.
type metrics struct {
	prefixQueries    prometheus.Counter
	prefixHits       prometheus.Counter
	promptTokens     prometheus.Counter
	generationTokens prometheus.Counter
	ttft             prometheus.Histogram
	itl              prometheus.Histogram
	e2e              prometheus.Histogram
	finished         *prometheus.CounterVec // finished_reason
	rejected         *prometheus.CounterVec // reason
}

// latencyBuckets are vLLM's time_to_first_token_seconds buckets, cut at 20 s.
var latencyBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20}

// itlBuckets span the simulator's decode steps (milliseconds) up to 2.5 s.
var itlBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5}

func newMetrics(reg prometheus.Registerer, s *Server) *metrics {
	labels := prometheus.Labels{"model_name": s.cfg.Model}
	m := &metrics{
		prefixQueries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "vllm:prefix_cache_queries_total", ConstLabels: labels,
			Help: "Prompt tokens looked up in the prefix cache.",
		}),
		prefixHits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "vllm:prefix_cache_hits_total", ConstLabels: labels,
			Help: "Prompt tokens found in the prefix cache.",
		}),
		promptTokens: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "vllm:prompt_tokens_total", ConstLabels: labels,
			Help: "Prompt tokens prefilled (cached ones included).",
		}),
		generationTokens: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "vllm:generation_tokens_total", ConstLabels: labels,
			Help: "Output tokens sent.",
		}),
		ttft: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "vllm:time_to_first_token_seconds", ConstLabels: labels, Buckets: latencyBuckets,
			Help: "Time from arrival (after any injected stall) to the first token: queueing plus prefill.",
		}),
		itl: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "vllm:inter_token_latency_seconds", ConstLabels: labels, Buckets: itlBuckets,
			Help: "Time between successive output tokens (time per output token), one sample per token after the first; " +
				"a non-streamed answer, decoded in one sleep, gives its mean gap once per token.",
		}),
		e2e: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "vllm:e2e_request_latency_seconds", ConstLabels: labels, Buckets: latencyBuckets,
			Help: "Time from arrival to the last token of finished requests.",
		}),
		finished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vllm:request_success_total", ConstLabels: labels,
			Help: "Requests that reached the engine, by finished_reason (stop, length, abort).",
		}, []string{"finished_reason"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mockllm_requests_rejected_total", ConstLabels: labels,
			Help: "Requests answered with an error before reaching a slot, by reason (bad_request, queue_full, injected_error, closed).",
		}, []string{"reason"}),
	}
	running := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "vllm:num_requests_running", ConstLabels: labels,
		Help: "Requests holding a batch slot (prefilling or decoding).",
	}, func() float64 { st := s.Stats(); return float64(st.Running) })
	waiting := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "vllm:num_requests_waiting", ConstLabels: labels,
		Help: "Requests queued for a batch slot.",
	}, func() float64 { st := s.Stats(); return float64(st.Waiting) })
	kv := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "vllm:kv_cache_usage_perc", ConstLabels: labels,
		Help: "Fraction of KV cache blocks reserved by running requests (1 = full).",
	}, func() float64 { return s.Stats().KVCacheUsage })
	reg.MustRegister(m.prefixQueries, m.prefixHits, m.promptTokens, m.generationTokens,
		m.ttft, m.itl, m.e2e, m.finished, m.rejected, running, waiting, kv)
	for _, r := range []string{finishStop, finishLength, finishAbort} {
		m.finished.WithLabelValues(r)
	}
	for _, r := range []string{rejectBadRequest, rejectQueueFull, rejectInjected, rejectClosed} {
		m.rejected.WithLabelValues(r)
	}
	return m
}
