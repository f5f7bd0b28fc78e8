package upstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/triage-gw/triage/upstream/policy"
	"golang.org/x/sync/errgroup"
)

// ErrNoHealthyReplica is returned when a pool has no replica that may take a
// request (all ejected, draining or failing their health checks).
var ErrNoHealthyReplica = errors.New("no healthy replica")

// ErrUnknownReplica is returned by Drain and Undrain for an ID the pool does
// not hold.
var ErrUnknownReplica = errors.New("unknown replica")

// Options are a pool's collaborators. The zero value is usable.
type Options struct {
	// Logger receives health transitions, ejections, retries and recovered
	// panics. Nil means slog.Default().
	Logger *slog.Logger
	// Registerer receives the triage_upstream_* metrics. Several pools may
	// share one Registerer. Nil means a private registry (nothing exported).
	Registerer prometheus.Registerer
	// Transport sends every upstream request, probe and scrape. Nil means a
	// pool-owned *http.Transport built from the pool's Timeouts (connect
	// timeout, 256 idle connections per host, compression untouched); an
	// injected RoundTripper gets only the first-byte and stream-idle timeouts
	// from the pool and is not closed by it.
	Transport http.RoundTripper
	// Now tells time for ejection cooldowns, scrape freshness and the
	// policy built from the config (policy.Env). Nil means time.Now.
	// Latencies (TTFB) always use the monotonic clock.
	Now func() time.Time
	// Picker replaces the policy built from PoolConfig.Policy (tests,
	// benchmarks). Nil means build it from the config.
	Picker policy.Picker
	// Admitter replaces the admission built from PoolConfig.Admission. Nil
	// means build it from the config.
	Admitter Admitter
	// Picks receives every pick the pool's policy can share with the other
	// gateways of a fleet (policies implementing policy.Sharer). Nil means
	// local mode: nothing is published.
	Picks PickPublisher
	// Remote adds the other gateways' requests in flight to each candidate's
	// InFlight, so the policy balances the fleet's load. Nil means local
	// mode: InFlight is this gateway's own.
	Remote RemoteLoad
	// BaselinePrices prices this pool's tokens a second time, in
	// triage_upstream_cost_baseline_total: what they would have cost on the
	// baseline pool. The gateway passes the slow pool's prices to both pools,
	// so the sum over pools is the all-slow counterfactual. Nil means no
	// baseline counter.
	BaselinePrices *Prices
}

// Pool is a set of replicas serving one model, and the only way requests
// reach them. See the package documentation for concurrency and lifecycle.
type Pool struct {
	cfg       PoolConfig
	replicas  []*replica
	byID      map[string]*replica
	picker    policy.Picker
	finisher  policy.Finisher     // picker as a policy.Finisher, or nil
	ttfts     policy.TTFTObserver // picker as a policy.TTFTObserver, or nil
	sharer    policy.Sharer       // picker as a policy.Sharer, or nil
	picks     PickPublisher       // nil in local mode
	remote    RemoteLoad          // nil in local mode
	admitter  Admitter
	transport http.RoundTripper
	owned     *http.Transport // closed by Run on exit; nil if injected
	log       *slog.Logger
	now       func() time.Time
	metrics   *metrics
	retries   prometheus.Counter
	retry     retryRule
	// tries counts each try by its number (from 1) and how it ended; only numbers up to
	// the rule's max_tries are resolved.
	tries   [maxTriesLimit][numTryOutcomes]prometheus.Counter
	traced  bool // the transport reports connections to a client trace (connFailure)
	running atomic.Bool
	kv      *kvRouting // nil when no replica publishes KV-cache events

	// The cost counters; nil when there are no prices to count with.
	cost, baselineCost prometheus.Counter
	baseline           *Prices

	// sloTarget is the TTFT target of a request without its own
	// (policy.slo.ttft_target; 0: none); sloMet and sloMissed count the
	// measured answers with a target against it.
	sloTarget         time.Duration
	sloMet, sloMissed prometheus.Counter

	// whole picks the replica of a request that runs whole (on one replica): the pool's
	// policy among the replicas that are not prefill-only.
	whole chooser
	// pd is the prefill/decode hand-off; nil unless some replica has role prefill.
	pd *disagg
}

// New builds a pool with the replica policy and admission its config names
// (or those injected through opts). cfg must pass Validate (New calls it).
// This is the one way pools are built: the gateway and the benchmarks both
// call it.
func New(cfg PoolConfig, opts Options) (*Pool, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("pool %q: %w", cfg.Name, err)
	}
	if opts.BaselinePrices != nil {
		if err := opts.BaselinePrices.ValidateAt("baseline prices"); err != nil {
			return nil, fmt.Errorf("pool %q: %w", cfg.Name, err)
		}
	}
	reg := opts.Registerer
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("pool %q: %w", cfg.Name, err)
	}
	picker, admitter := opts.Picker, opts.Admitter
	if picker == nil {
		evictions := m.evictions.MustCurryWith(prometheus.Labels{"pool": cfg.Name})
		env := policy.Env{Now: opts.Now, Evicted: func(table string, n int) {
			evictions.WithLabelValues(table).Add(float64(n))
		}}
		if picker, err = policy.New(cfg.Policy, env); err != nil {
			return nil, fmt.Errorf("pool %q: %w", cfg.Name, err)
		}
	}
	if admitter == nil {
		if admitter, err = NewAdmitter(cfg.Admission); err != nil {
			return nil, fmt.Errorf("pool %q: %w", cfg.Name, err)
		}
	}
	p := &Pool{
		cfg:       cfg,
		byID:      make(map[string]*replica, len(cfg.Replicas)),
		picker:    picker,
		admitter:  admitter,
		transport: opts.Transport,
		log:       opts.Logger,
		now:       opts.Now,
		metrics:   m,
		retries:   m.retries.WithLabelValues(cfg.Name),
		retry:     newRetryRule(cfg.Retry),
		picks:     opts.Picks,
		remote:    opts.Remote,
	}
	// Created now, so a dashboard finds the series at 0 before any traffic.
	if cfg.Prices != nil {
		p.cost = m.cost.WithLabelValues(cfg.Name)
	}
	if opts.BaselinePrices != nil {
		p.baseline = opts.BaselinePrices
		p.baselineCost = m.baselineCost.WithLabelValues(cfg.Name)
	}
	p.sloTarget = policy.SectionOf[policy.SLOConfig](cfg.Policy, "slo").TTFTTarget
	p.sloMet, p.sloMissed = m.slo.WithLabelValues(cfg.Name, "met"), m.slo.WithLabelValues(cfg.Name, "missed")
	p.finisher, _ = picker.(policy.Finisher)
	p.ttfts, _ = picker.(policy.TTFTObserver)
	p.sharer, _ = picker.(policy.Sharer)
	if p.log == nil {
		p.log = slog.Default()
	}
	p.log = p.log.With("pool", cfg.Name)
	if p.now == nil {
		p.now = time.Now
	}
	if p.transport == nil {
		p.owned = newTransport(cfg.Timeouts)
		p.transport = p.owned
	}
	_, p.traced = p.transport.(*http.Transport)
	for try := range cfg.Retry.MaxTries {
		for o := range numTryOutcomes {
			p.tries[try][o] = m.tries.WithLabelValues(cfg.Name, strconv.Itoa(try+1), o.String())
		}
	}
	for i, rc := range cfg.Replicas {
		r := newReplica(replicaID(cfg.Name, i, rc), rc, cfg.Model, cfg.Engine)
		r.metrics = m.forReplica(cfg.Name, r.id)
		p.replicas = append(p.replicas, r)
		p.byID[r.id] = r
		p.publish(r, true)
	}
	if err := p.initKV(reg); err != nil {
		return nil, fmt.Errorf("pool %q: %w", cfg.Name, err)
	}
	p.whole = chooser{picker: picker, finisher: p.finisher, ttfts: p.ttfts}
	if p.pd, err = newDisagg(cfg, m, reg, opts.Now); err != nil {
		return nil, fmt.Errorf("pool %q: %w", cfg.Name, err)
	}
	return p, nil
}

// newTransport pools connections generously: an LLM gateway holds many
// long streams to few hosts. Compression is left to the client and the
// replica (DisableCompression), so bytes pass through unchanged. Proxy
// settings from the environment are deliberately not consulted.
func newTransport(t TimeoutsConfig) *http.Transport {
	dialer := &net.Dialer{Timeout: t.Connect.Std(), KeepAlive: 30 * time.Second}
	return &http.Transport{
		DialContext:         dialer.DialContext,
		TLSHandshakeTimeout: t.Connect.Std(),
		MaxIdleConns:        0, // no global cap; per-host cap below
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     t.IdleConn.Std(), // below the replicas' keep-alive, see TimeoutsConfig
		DisableCompression:  true,
		ForceAttemptHTTP2:   true,
	}
}

// Name returns the pool's configured name.
func (p *Pool) Name() string { return p.cfg.Name }

// PolicyName returns the name of the pool's replica policy (policy.name).
func (p *Pool) PolicyName() string { return p.cfg.Policy.Name }

// Disaggregation returns the pool's prefill/decode settings (the leg policies' names).
func (p *Pool) Disaggregation() DisaggregationConfig { return p.cfg.Disaggregation }

// AskStreamUsage reports the pool's ask_stream_usage setting: whether a
// stream may be sent with stream_options.include_usage its client did not ask
// for (the caller then drops the usage chunk, see IsUsageChunk).
func (p *Pool) AskStreamUsage() bool { return p.cfg.AskStreamUsage }

// Model returns the model name sent to the replica, or "" for an unknown ID.
func (p *Pool) Model(replicaID string) string {
	if r, ok := p.byID[replicaID]; ok {
		return r.model
	}
	return ""
}

// Healthy reports whether at least one replica may take a new request now
// (passing checks, not ejected, not draining). Replicas at
// MaxInFlightPerReplica still count: they are busy, not broken.
func (p *Pool) Healthy() bool {
	now := p.now()
	some := false
	for _, r := range p.replicas {
		ok := r.available(now)
		p.publish(r, ok)
		some = some || ok
	}
	return some
}

// InFlight returns the number of requests sent and not yet finished, summed
// over replicas. Shutdown waits for it to reach zero.
func (p *Pool) InFlight() int {
	n := int64(0)
	for _, r := range p.replicas {
		n += r.inFlight.Load()
	}
	return int(n)
}

// Replicas returns a snapshot of every replica in configuration order.
func (p *Pool) Replicas() []ReplicaStatus {
	now := p.now()
	var remote map[string]int
	if p.remote != nil {
		remote = p.remote.RemoteInFlight(p.cfg.Name)
	}
	out := make([]ReplicaStatus, len(p.replicas))
	for i, r := range p.replicas {
		out[i] = r.status(now, p.staleAfter())
		out[i].RemoteInFlight = remote[r.id]
	}
	return out
}

// Tracer returns the decision tracer of the pool's picker: the recent
// decisions with their best-scored candidates (see policy.Tracer.Recent).
// It is nil when tracing is off (PoolConfig.Policy.Trace.Enabled false) or
// when an injected Options.Picker keeps no tracer.
func (p *Pool) Tracer() *policy.Tracer {
	if t, ok := p.picker.(policy.Traceable); ok {
		return t.Tracer()
	}
	return nil
}

// Drain stops new requests to the replica; those in flight finish. It is
// idempotent.
func (p *Pool) Drain(replicaID string) error { return p.setDraining(replicaID, true) }

// Undrain returns a drained replica to service. It is idempotent.
func (p *Pool) Undrain(replicaID string) error { return p.setDraining(replicaID, false) }

func (p *Pool) setDraining(id string, on bool) error {
	r, ok := p.byID[id]
	if !ok {
		return fmt.Errorf("pool %s: %w %q", p.cfg.Name, ErrUnknownReplica, id)
	}
	if r.setDraining(on) {
		p.log.Info("replica drain changed", "replica", id, "draining", on, "in_flight", r.inFlight.Load())
	}
	p.publish(r, r.available(p.now()))
	return nil
}

// Run owns the pool's background work, active health checks and metric
// scraping, until ctx is done. It returns nil on cancellation. A pool serves
// requests without Run, with every replica assumed healthy and no load
// signals. Run may be called once.
func (p *Pool) Run(ctx context.Context) error {
	if !p.running.CompareAndSwap(false, true) {
		return fmt.Errorf("pool %s: Run called twice", p.cfg.Name)
	}
	if p.owned != nil {
		defer p.owned.CloseIdleConnections()
	}
	g, ctx := errgroup.WithContext(ctx)
	if every := p.cfg.HealthCheck.Interval.Std(); every > 0 {
		g.Go(func() error { p.every(ctx, "health_check", every, p.checkOnce); return nil })
	}
	if every := p.cfg.ScrapeInterval.Std(); every > 0 {
		g.Go(func() error { p.every(ctx, "scrape", every, p.scrapeOnce); return nil })
	}
	g.Go(func() error { return p.runKV(ctx) })
	g.Go(func() error { <-ctx.Done(); return nil })
	return g.Wait()
}

// every runs fn now and then at each tick until ctx is done. A panic in fn
// is logged and the loop goes on.
func (p *Pool) every(ctx context.Context, loop string, d time.Duration, fn func(context.Context)) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		func() {
			defer p.recoverPanic(loop)
			fn(ctx)
		}()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// recoverPanic must be deferred directly.
func (p *Pool) recoverPanic(where string) {
	if v := recover(); v != nil {
		p.log.Error("recovered panic in upstream background work", "loop", where, "panic", fmt.Sprint(v))
	}
}

// staleAfter is the age past which scraped load is no longer Fresh: three
// scrape intervals, so one or two failed scrapes do not blank the signal.
func (p *Pool) staleAfter() time.Duration { return 3 * p.cfg.ScrapeInterval.Std() }

// publish sets the healthy gauge when availability changed.
func (p *Pool) publish(r *replica, ok bool) {
	v := int32(0)
	if ok {
		v = 1
	}
	if r.published.Swap(v) != v {
		r.metrics.healthy.Set(float64(v))
	}
}

// observe folds a request outcome into the replica's passive-ejection state.
func (p *Pool) observe(r *replica, ok bool) {
	pe := p.cfg.PassiveEjection
	if r.recordPassive(ok, p.now(), pe.ConsecutiveFailures, pe.Cooldown.Std()) {
		r.metrics.ejections.Inc()
		p.publish(r, false)
		p.log.Warn("replica ejected after consecutive failures", "replica", r.id,
			"consecutive_failures", pe.ConsecutiveFailures, "cooldown", pe.Cooldown.String())
	}
}

// acquire picks a replica for a request that runs whole: acquireBy with the pool's policy.
func (p *Pool) acquire(req *policy.Request, exclude []string) (r *replica, inFlight int, err error) {
	return p.acquireBy(&p.whole, req, exclude)
}

// acquireBy picks a replica for req with ch among those available now that
// ch picks among (excluding those named in exclude, for retries) and counts
// the request in flight on it. inFlight is the chosen replica's load as the
// picker saw it.
func (p *Pool) acquireBy(ch *chooser, req *policy.Request, exclude []string) (r *replica, inFlight int, err error) {
	now := p.now()
	stale := p.staleAfter()
	limit := p.cfg.MaxInFlightPerReplica
	cands := make([]policy.Candidate, 0, len(p.replicas))
	reps := make([]*replica, 0, len(p.replicas))
	full := 0
	var remote map[string]int
	if p.remote != nil {
		remote = p.remote.RemoteInFlight(p.cfg.Name)
	}
	for _, r := range p.replicas {
		if slices.Contains(exclude, r.id) || !ch.takes(r) {
			continue
		}
		ok := r.available(now)
		p.publish(r, ok)
		switch {
		case !ok:
		case limit > 0 && r.inFlight.Load() >= int64(limit):
			full++
		default:
			c := r.candidate(now, stale)
			c.InFlight += remote[r.id]
			cands = append(cands, c)
			reps = append(reps, r)
		}
	}
	for len(cands) > 0 {
		i := ch.picker.Pick(req, cands)
		if i < 0 || i >= len(cands) {
			return nil, 0, fmt.Errorf("pool %s: picker returned index %d for %d candidates", p.cfg.Name, i, len(cands))
		}
		r := reps[i]
		if r.tryAcquire(limit) {
			r.metrics.inflight.Inc()
			p.publishPick(ch, req, r)
			p.expectBlocks(req, r)
			return r, cands[i].InFlight, nil
		}
		// Another request took the replica's last slot between the snapshot
		// and now. Let the picker forget this pick and choose again.
		if ch.finisher != nil {
			ch.finisher.Done(req, r.id, 0)
		}
		cands = append(cands[:i], cands[i+1:]...)
		reps = append(reps[:i], reps[i+1:]...)
		full++
	}
	if full > 0 {
		return nil, 0, fmt.Errorf("pool %s: %d replica(s) at max_in_flight_per_replica (%d): %w",
			p.cfg.Name, full, limit, ErrNoHealthyReplica)
	}
	return nil, 0, fmt.Errorf("pool %s: %w", p.cfg.Name, ErrNoHealthyReplica)
}

// report is what an attempt's answer said about the tokens it cost.
type report struct {
	answered bool  // a 2xx answer: the model ran
	usage    Usage // with metered: the replica's own numbers
	metered  bool
	unpriced bool // a prefill leg: its tokens are counted, the decode leg's are priced
}

// release ends one picked request: in-flight count, outcome metric, token
// and cost accounting, and the Done of the picker that chose it (ch's),
// exactly once per successful acquire.
func (p *Pool) release(ch *chooser, r *replica, req *policy.Request, o outcome, outputTokens int, rep report) {
	r.inFlight.Add(-1)
	r.metrics.inflight.Dec()
	r.metrics.outcomes[o].Inc()
	switch {
	case rep.metered:
		p.account(r, rep.usage, !rep.unpriced)
	case rep.answered:
		r.metrics.unmetered.Inc()
	}
	if ch.finisher != nil {
		ch.finisher.Done(req, r.id, outputTokens)
	}
}

// account counts one answer's tokens and, when priced, what they cost: at
// this pool's prices, and at the baseline's (Options.BaselinePrices).
func (p *Pool) account(r *replica, u Usage, priced bool) {
	r.metrics.promptTokens.Add(float64(u.PromptTokens))
	r.metrics.completionTokens.Add(float64(u.CompletionTokens))
	if !priced {
		return
	}
	if p.cost != nil {
		p.cost.Add(p.cfg.Prices.Cost(u))
	}
	if p.baselineCost != nil {
		p.baselineCost.Add(p.baseline.Cost(u))
	}
}
