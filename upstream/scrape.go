package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// vLLM's load gauges. Newer vLLM exports kv_cache_usage_perc; older
// versions call it gpu_cache_usage_perc. Both are fractions in 0..1 despite
// the name.
const (
	metricWaiting     = "vllm:num_requests_waiting"
	metricRunning     = "vllm:num_requests_running"
	metricKVCache     = "vllm:kv_cache_usage_perc"
	metricKVCacheOld  = "vllm:gpu_cache_usage_perc"
	maxMetricsBodyLen = 16 << 20
)

// vLLM's token counters and latency histograms, which the throughput and
// least-latency policies read as rates and means between two scrapes.
// vLLM's V1 engine calls the time per output token inter_token_latency;
// older versions time_per_output_token.
const (
	metricPromptTokens     = "vllm:prompt_tokens_total"
	metricGenerationTokens = "vllm:generation_tokens_total"
	metricTTFT             = "vllm:time_to_first_token_seconds"
	metricTPOT             = "vllm:inter_token_latency_seconds"
	metricTPOTOld          = "vllm:time_per_output_token_seconds"
)

// scrapeOnce fetches every replica's /metrics once, concurrently. A failed
// scrape keeps the previous values; they stop being Fresh after three
// intervals (see staleAfter). Each scrape is bounded by ScrapeInterval.
// Each round also publishes what the policy sees: the scraped gauges, their
// age and the failures (triage_upstream_scrape*), so a stale or failing
// signal shows on /metrics and not only in the log's transitions.
func (p *Pool) scrapeOnce(ctx context.Context) {
	var wg sync.WaitGroup
	for _, r := range p.replicas {
		wg.Go(func() {
			defer p.recoverPanic("scrape")
			l, err := p.scrape(ctx, r)
			if ctx.Err() != nil {
				return
			}
			if r.noteScrape(err != nil) {
				if err != nil {
					p.log.Warn("replica metrics scrape failing", "replica", r.id, "err", err)
				} else {
					p.log.Info("replica metrics scrape recovered", "replica", r.id)
				}
			}
			now := p.now()
			if err != nil {
				r.metrics.scrapeFailures.Inc()
			} else {
				l.scrapedAt = now
				l.derive(r.load.Load()) // only this goroutine stores r.load
				r.load.Store(l)
				r.metrics.scraped(l.waiting, l.running, l.kv)
			}
			if last := r.load.Load(); last != nil {
				r.metrics.scrapeAged(now.Sub(last.scrapedAt))
			}
		})
	}
	wg.Wait()
}

func (p *Pool) scrape(ctx context.Context, r *replica) (*replicaLoad, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.ScrapeInterval.Std())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.endpoint("/metrics"), nil)
	if err != nil {
		return nil, err
	}
	for k, v := range r.headers {
		req.Header[k] = []string{v}
	}
	// Ask for the classic text format; vLLM's prometheus_client serves it by
	// default, and the text parser does not read OpenMetrics.
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := p.transport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return nil, fmt.Errorf("scrape /metrics: status %d", resp.StatusCode)
	}
	return parseVLLMMetrics(io.LimitReader(resp.Body, maxMetricsBodyLen))
}

// parseVLLMMetrics reads a Prometheus text exposition and extracts vLLM's
// load gauges. Waiting and running requests are summed across label sets
// (one per model or engine). KV-cache utilisation is averaged across them,
// since it is a fraction per engine and a sum could exceed 1. A body with
// none of the gauges is an error: the replica is not a vLLM-like server.
// The token counters and the latency histograms' sums and counts are summed
// across label sets and kept as they are, for derive; each is optional.
func parseVLLMMetrics(body io.Reader) (*replicaLoad, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(body)
	if err != nil {
		return nil, fmt.Errorf("parse /metrics: %w", err)
	}
	// sum returns the total and number of samples of a gauge, counter or
	// untyped family.
	sum := func(name string) (total float64, n int) {
		mf, ok := fams[name]
		if !ok {
			return 0, 0
		}
		for _, m := range mf.GetMetric() {
			switch {
			case m.GetGauge() != nil:
				total += m.GetGauge().GetValue()
			case m.GetUntyped() != nil:
				total += m.GetUntyped().GetValue()
			case m.GetCounter() != nil:
				total += m.GetCounter().GetValue()
			default:
				continue
			}
			n++
		}
		return total, n
	}
	waiting, nw := sum(metricWaiting)
	running, nr := sum(metricRunning)
	kv, nk := sum(metricKVCache)
	if nk == 0 {
		kv, nk = sum(metricKVCacheOld)
	}
	if nw == 0 && nr == 0 && nk == 0 {
		return nil, errors.New("parse /metrics: no vllm:num_requests_waiting, vllm:num_requests_running or vllm:kv_cache_usage_perc")
	}
	l := &replicaLoad{waiting: int(waiting), running: int(running)}
	if nk > 0 {
		l.kv = kv / float64(nk)
	}
	counter := func(name string) cumulative {
		v, n := sum(name)
		return cumulative{sum: v, ok: n > 0}
	}
	// histogram returns a histogram family's sum and count, summed across
	// its label sets.
	histogram := func(name string) (c cumulative) {
		for _, m := range fams[name].GetMetric() {
			if h := m.GetHistogram(); h != nil {
				c.sum += h.GetSampleSum()
				c.count += float64(h.GetSampleCount())
				c.ok = true
			}
		}
		return c
	}
	l.promptTokens = counter(metricPromptTokens)
	l.generationTokens = counter(metricGenerationTokens)
	l.ttftHist = histogram(metricTTFT)
	if l.tpotHist = histogram(metricTPOT); !l.tpotHist.ok {
		l.tpotHist = histogram(metricTPOTOld)
	}
	return l, nil
}

// cumulative is a counter's value (sum), or a histogram's sum and count,
// as scraped; ok is false when the replica did not export it.
type cumulative struct {
	sum, count float64
	ok         bool
}

// mean is a latency mean in seconds; ok is false when there is none.
type mean struct {
	v  float64
	ok bool
}

// derive fills l's token rates and latency means by comparing its
// cumulative values with prev, the replica's previous successful scrape
// (nil before the first).
//
// Rates need both scrapes to carry the counter and the counter not to have
// gone down (a restarted replica): otherwise they are unknown for this
// interval. A latency mean covers the samples added since prev; an interval
// that added none (an idle replica) keeps prev's mean, and one whose count
// went down (a restart) takes the mean of everything since the restart.
func (l *replicaLoad) derive(prev *replicaLoad) {
	if prev == nil {
		return
	}
	if dt := l.scrapedAt.Sub(prev.scrapedAt).Seconds(); dt > 0 &&
		l.promptTokens.ok && prev.promptTokens.ok && l.generationTokens.ok && prev.generationTokens.ok {
		dp := l.promptTokens.sum - prev.promptTokens.sum
		dg := l.generationTokens.sum - prev.generationTokens.sum
		if dp >= 0 && dg >= 0 {
			l.promptRate, l.generationRate, l.rates = dp/dt, dg/dt, true
		}
	}
	l.ttft = windowMean(l.ttftHist, prev.ttftHist, prev.ttft)
	l.tpot = windowMean(l.tpotHist, prev.tpotHist, prev.tpot)
}

// windowMean is the mean of the samples a histogram gained between prev
// and cur, or last when it gained none. A histogram no longer exported has
// no mean.
func windowMean(cur, prev cumulative, last mean) mean {
	if !cur.ok {
		return mean{}
	}
	if !prev.ok {
		return last
	}
	switch dc := cur.count - prev.count; {
	case dc > 0 && cur.sum >= prev.sum:
		return mean{v: (cur.sum - prev.sum) / dc, ok: true}
	case dc < 0 && cur.count > 0:
		return mean{v: cur.sum / cur.count, ok: true}
	default:
		return last
	}
}
