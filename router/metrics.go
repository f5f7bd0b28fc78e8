package router

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/triage-gw/triage/classifier"
	"github.com/triage-gw/triage/decision"
)

// metrics are the pipeline's series. Label values come from small fixed sets: paths,
// decision reasons, cache results, model versions.
type metrics struct {
	decisions     *prometheus.CounterVec // path, reason
	cacheRequests *prometheus.CounterVec // result
	modelInfo     *prometheus.GaugeVec   // version
	reloads       *prometheus.CounterVec // result
	// classifications counts fresh classifications (cache misses) by the stage that made
	// them; stageDecisions counts routed decisions by the stage behind their P(slow).
	classifications *prometheus.CounterVec // stage
	stageDecisions  *prometheus.CounterVec // stage
	// fallbacks counts routed requests whose classification failed them, by reason.
	fallbacks *prometheus.CounterVec // reason
	// inBandRescues counts the fallbacks decided on the first stage's in-band score instead.
	inBandRescues *prometheus.CounterVec // reason
}

// newMetrics registers the pipeline's metrics on reg; the gauges are read from r at scrape
// time.
func newMetrics(reg prometheus.Registerer, r *Router) (*metrics, error) {
	m := &metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "triage_decisions_total",
			Help: "Routing decisions of executed requests (query-process and the OpenAI endpoints) by path and reason.",
		}, []string{"path", "reason"}),
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
	}
	m.classifications = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "triage_classifications_total",
		Help: "Texts classified (cache misses) by the stage that decided them: static (the cascade's first stage) or encoder.",
	}, []string{"stage"})
	m.stageDecisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "triage_stage_decisions_total",
		Help: "Routing decisions of executed requests by the classifier stage behind their P(slow), cache hits included.",
	}, []string{"stage"})
	m.fallbacks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "triage_classifier_fallbacks_total",
		Help: "Routed requests whose classification failed them (budget spent, queue full, classifier unavailable), by reason; routing.fallback placed or refused them.",
	}, []string{"reason"})
	m.inBandRescues = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "triage_classifier_in_band_decisions_total",
		Help: "Of triage_classifier_fallbacks_total, the requests decided on the cascade's first-stage score (inside its band) instead of placed by routing.fallback, by the encoder's failure.",
	}, []string{"reason"})
	for _, rs := range []decision.Reason{decision.ReasonClassifierTimeout, decision.ReasonClassifierBusy, decision.ReasonClassifierUnavailable} {
		m.fallbacks.WithLabelValues(string(rs))
		m.inBandRescues.WithLabelValues(string(rs))
	}
	for _, st := range []string{"static", "encoder"} {
		m.classifications.WithLabelValues(st)
		m.stageDecisions.WithLabelValues(st)
	}
	m.cacheRequests.WithLabelValues("hit")
	m.cacheRequests.WithLabelValues("miss")
	m.reloads.WithLabelValues("ok")
	m.reloads.WithLabelValues("error")
	all := []prometheus.Collector{
		m.decisions, m.cacheRequests, m.modelInfo, m.reloads, m.classifications, m.stageDecisions, m.fallbacks, m.inBandRescues,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "triage_slow_active",
			Help: "Requests holding a slow slot.",
		}, func() float64 { return float64(r.slots.Active()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "triage_slow_load",
			Help: "Slow-path load: slow_active / decision.max_slow_concurrency, in [0, 1].",
		}, func() float64 { return r.State().Load() }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "triage_decision_threshold",
			Help: "The P(slow) a request must exceed to go slow now: the larger of the load threshold and the slow-share cap's floor.",
		}, r.Threshold),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "triage_decision_budget_threshold",
			Help: "The slow-share cap's floor: the P(slow) only decision.max_slow_share of the window's routed requests (or of their tokens, per decision.share_unit) exceed (0: no cap, or too few requests).",
		}, r.share.Threshold),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "triage_slow_share",
			Help: "Share of the routed requests of the last decision.share_window that went slow, in decision.share_unit: of the requests, or of their tokens.",
		}, func() float64 { s, _ := r.share.Share(); return s }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "triage_slow_share_max",
			Help: "decision.max_slow_share, the cap on triage_slow_share (0: none).",
		}, r.share.Max),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "triage_cache_evictions_total",
			Help: "Entries evicted from the result cache (ristretto's count).",
		}, r.cache.evictions),
		wordCacheCollector{r},
	}
	for _, c := range all {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("router: register metrics: %w", err)
		}
	}
	return m, nil
}

// setModel makes version the only one reported by triage_model_info.
func (m *metrics) setModel(version string) {
	m.modelInfo.Reset()
	m.modelInfo.WithLabelValues(version).Set(1)
}

// WordCacheStater is a Model whose tokenizer keeps a word cache (*onnx.Classifier): its
// counts are exported as the triage_tokenizer_* series.
type WordCacheStater interface {
	WordCacheStats() (classifier.WordCacheStats, bool)
}

var (
	tokTextsDesc = prometheus.NewDesc("triage_tokenizer_texts_total",
		"Texts the classifier tokenized, by path: word_cache (read from the word cache, new words split or learnt on the way) or tokenizer (the HF tokenizer on the whole text: one with a word over 64 bytes, or new words still missing after a few rounds). Kept across a reload that keeps the tokenizer; absent when the tokenizer is not one the cache can reproduce.",
		[]string{"path"}, nil)
	tokWordsDesc = prometheus.NewDesc("triage_tokenizer_new_words_total",
		"Words the word cache added, by who split them: word_cache (printable ASCII, split by the cache itself) or tokenizer (learnt from the HF tokenizer's answer).",
		[]string{"by"}, nil)
	tokCachedDesc = prometheus.NewDesc("triage_tokenizer_cached_words",
		"Words the word cache holds now (it starts again empty at about 8 MiB).", nil, nil)
)

// wordCacheCollector reads the current model's word-cache counts at scrape time; it
// reports nothing for a model without one.
type wordCacheCollector struct{ r *Router }

func (wordCacheCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- tokTextsDesc
	ch <- tokWordsDesc
	ch <- tokCachedDesc
}

func (c wordCacheCollector) Collect(ch chan<- prometheus.Metric) {
	l := c.r.models.peek()
	if l == nil {
		return
	}
	ws, ok := l.m.(WordCacheStater)
	if !ok {
		return
	}
	st, ok := ws.WordCacheStats()
	if !ok {
		return
	}
	ch <- prometheus.MustNewConstMetric(tokTextsDesc, prometheus.CounterValue, float64(st.Answered), "word_cache")
	ch <- prometheus.MustNewConstMetric(tokTextsDesc, prometheus.CounterValue, float64(st.Whole), "tokenizer")
	ch <- prometheus.MustNewConstMetric(tokWordsDesc, prometheus.CounterValue, float64(st.Split), "word_cache")
	ch <- prometheus.MustNewConstMetric(tokWordsDesc, prometheus.CounterValue, float64(st.Learnt), "tokenizer")
	ch <- prometheus.MustNewConstMetric(tokCachedDesc, prometheus.GaugeValue, float64(st.Words))
}
