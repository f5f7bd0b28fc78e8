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

// scrapeOnce fetches every replica's /metrics once, concurrently. A failed
// scrape keeps the previous values; they stop being Fresh after three
// intervals (see staleAfter). Each scrape is bounded by ScrapeInterval.
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
			if err == nil {
				l.scrapedAt = p.now()
				r.load.Store(l)
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
	return l, nil
}
