package upstream

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// maxMetricsBodyLen bounds a replica's /metrics answer.
const maxMetricsBodyLen = 16 << 20

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
				prev := r.load.Load() // only this goroutine stores r.load
				l.scrapedAt = now
				l.derive(prev)
				if s := p.kvSubscriber(r.id); s != nil {
					l.eventsBlockSize = s.BlockSize()
				}
				r.load.Store(l)
				r.metrics.scraped(l)
				p.noteEngine(r, prev, l)
			}
			if last := r.load.Load(); last != nil {
				r.metrics.scrapeAged(now.Sub(last.scrapedAt))
			}
		})
	}
	wg.Wait()
}

// noteEngine logs what changed in a replica's engine since its previous
// scrape: the engine its /metrics was read as, and the block size it
// states, which is checked against what the pool's KV-event routing uses
// (the configured size, and the size the replica's events carry). Each is
// logged when it changes, not at every scrape.
func (p *Pool) noteEngine(r *replica, prev, l *replicaLoad) {
	if prev == nil || prev.engine != l.engine {
		p.log.Info("replica metrics read", "replica", r.id, "engine", l.engine, "setting", r.engineSetting(),
			"kv_cache_usage", l.kvOK)
	}
	if l.blockSize == 0 || p.kv == nil {
		return
	}
	if bs := p.cfg.KVEvents.BlockSize; bs > 0 && bs != l.blockSize && (prev == nil || prev.blockSize != l.blockSize) {
		p.log.Warn("replica's engine states another KV block size than kv_events.block_size; using the engine's",
			"replica", r.id, "engine_block_size", l.blockSize, "configured_block_size", bs)
	}
	if bs := l.eventsBlockSize; bs > 0 && bs != l.blockSize &&
		(prev == nil || prev.blockSize != l.blockSize || prev.eventsBlockSize != bs) {
		p.log.Warn("replica's KV events and its /metrics state different block sizes; using the events'",
			"replica", r.id, "events_block_size", bs, "metrics_block_size", l.blockSize)
	}
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
	return parseMetrics(io.LimitReader(resp.Body, maxMetricsBodyLen), r.engine)
}

// parseMetrics reads a Prometheus text exposition and extracts the load
// signals under engine's names (see engines); engine "" or auto takes the
// one engine whose load gauges the body holds. Waiting and running requests
// are summed across label sets (one per model, engine or data-parallel
// rank). KV-cache utilisation is averaged across them, since it is a
// fraction per engine and a sum could exceed 1; an engine without a KV
// gauge leaves it unknown (kvOK false). A body with none of the engine's
// load gauges is an error: the replica is not that engine (or not an
// engine at all). The token counters and the latency histograms' sums and
// counts are summed across label sets and kept as they are, for derive;
// each is optional.
func parseMetrics(body io.Reader, engine string) (*replicaLoad, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(body)
	if err != nil {
		return nil, fmt.Errorf("parse /metrics: %w", err)
	}
	e, err := pickEngine(fams, engine)
	if err != nil {
		return nil, err
	}
	// sum returns the total and number of samples of the first family of
	// names present: gauges, counters and untyped samples by their value,
	// histograms by the sum of their observations.
	sum := func(names []string) (total float64, n int) {
		for _, name := range names {
			mf, ok := fams[name]
			if !ok {
				continue
			}
			for _, m := range mf.GetMetric() {
				switch {
				case m.GetGauge() != nil:
					total += m.GetGauge().GetValue()
				case m.GetUntyped() != nil:
					total += m.GetUntyped().GetValue()
				case m.GetCounter() != nil:
					total += m.GetCounter().GetValue()
				case m.GetHistogram() != nil:
					total += m.GetHistogram().GetSampleSum()
				default:
					continue
				}
				n++
			}
			if n > 0 {
				return total, n
			}
		}
		return 0, 0
	}
	waiting, nw := sum(e.waiting)
	running, nr := sum(e.running)
	kv, nk := sum(e.kv)
	if nw == 0 && nr == 0 && nk == 0 {
		return nil, e.missingGauges()
	}
	l := &replicaLoad{engine: e.name, waiting: int(waiting), running: int(running)}
	if nk > 0 {
		l.kv, l.kvOK = kv/float64(nk), true
	}
	counter := func(names []string) cumulative {
		v, n := sum(names)
		return cumulative{sum: v, ok: n > 0}
	}
	// histogram returns the first present histogram family's sum and
	// count, summed across its label sets.
	histogram := func(names []string) (c cumulative) {
		for _, name := range names {
			for _, m := range fams[name].GetMetric() {
				if h := m.GetHistogram(); h != nil {
					c.sum += h.GetSampleSum()
					c.count += float64(h.GetSampleCount())
					c.ok = true
				}
			}
			if c.ok {
				return c
			}
		}
		return c
	}
	l.promptTokens = counter(e.promptTokens)
	l.generationTokens = counter(e.generationTokens)
	l.ttftHist = histogram(e.ttft)
	l.tpotHist = histogram(e.tpot)
	if !l.tpotHist.ok && e.tpotPair[0] != "" {
		secs, tokens := counter(e.tpotPair[:1]), counter(e.tpotPair[1:])
		l.tpotHist = cumulative{sum: secs.sum, count: tokens.sum, ok: secs.ok && tokens.ok}
	}
	if e.blockInfo != "" {
		l.blockSize = infoLabelInt(fams[e.blockInfo], e.blockLabel)
	}
	return l, nil
}

// pickEngine returns the engine named by setting, or for auto (or "") the
// only engine with a load gauge in fams. Several make auto ambiguous.
func pickEngine(fams map[string]*dto.MetricFamily, setting string) (*engineMetrics, error) {
	if e := engines[setting]; e != nil {
		return e, nil
	}
	var found []*engineMetrics
	for _, name := range engineOrder {
		e := engines[name]
		for _, f := range e.loadFamilies() {
			if _, ok := fams[f]; ok {
				found = append(found, e)
				break
			}
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return nil, fmt.Errorf("parse /metrics: no load gauges of any known engine (%s); "+
			"is /metrics an inference engine's, with metrics enabled?", strings.Join(engineOrder, ", "))
	default:
		names := make([]string, len(found))
		for i, e := range found {
			names[i] = e.name
		}
		return nil, fmt.Errorf("parse /metrics: load gauges of several engines (%s); set engine on the replica",
			strings.Join(names, ", "))
	}
}

// infoLabelInt reads a positive integer from label of an info gauge's
// first sample that has one; 0 when none does.
func infoLabelInt(mf *dto.MetricFamily, label string) int {
	for _, m := range mf.GetMetric() {
		for _, lp := range m.GetLabel() {
			if lp.GetName() != label {
				continue
			}
			if n, err := strconv.Atoi(lp.GetValue()); err == nil && n > 0 {
				return n
			}
		}
	}
	return 0
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
