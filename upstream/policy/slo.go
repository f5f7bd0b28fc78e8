package policy

import (
	"errors"
	"fmt"
	"time"
)

// Names of the SLO family, after AIBrix's SLO routers. slo is slo-least-load:
// AIBrix's slo is its pulling variant, which is not implemented here (see
// SLO), and slo-least-load is that variant's push-mode twin.
const (
	nameSLO          = "slo"
	nameSLOLeastLoad = "slo-least-load"
	nameSLOPackLoad  = "slo-pack-load"
)

// The values of SLOConfig.Fallback.
const (
	SLOFallbackLeastRequest   = "least-request"
	SLOFallbackLeastPredicted = "least-predicted"
)

// Trace notes of the SLO family: which branch decided.
const (
	noteSLOMet      = "slo-met"      // some replica was predicted to meet the target
	noteSLOMiss     = "slo-fallback" // none was: Fallback decided
	noteSLONoTarget = "slo-no-target"
)

// SLOConfig tunes the SLO family (slo, slo-least-load, slo-pack-load); the
// three share this section.
type SLOConfig struct {
	// TTFTTarget is the time-to-first-token target of a request that
	// carries none (no x-slo-ttft-ms header). Default 0: such a request has
	// no target and is routed by least-request, so a pool opts in to SLO
	// routing per request, or for all its requests by setting this.
	TTFTTarget time.Duration `yaml:"ttft_target" json:"ttft_target"`
	// Fallback decides when no replica is predicted to meet the target:
	// "least-request" (default; AIBrix's fallback router) or
	// "least-predicted" (the smallest predicted TTFT: the least-bad miss,
	// which prefers fast replicas even when all are late).
	Fallback string `yaml:"fallback" json:"fallback"`
	// Window is the time constant of the TTFT fit's sample weights: a
	// sample counts with weight e^(−age/Window). Default 1m.
	Window time.Duration `yaml:"window" json:"window"`
	// MinSamples is the decayed sample weight a replica's fit needs before
	// it is used; below it the replica is predicted from its scraped mean
	// TTFT, or to meet the target. Default 5.
	MinSamples int `yaml:"min_samples" json:"min_samples"`
}

func init() {
	leastLoad := func(c SLOConfig, env Env) (Picker, error) { return picker(NewSLO(c, false, env.Now)) }
	register(nameSLO, "slo", DefaultSLOConfig, leastLoad)
	register(nameSLOLeastLoad, "slo", DefaultSLOConfig, leastLoad)
	register(nameSLOPackLoad, "slo", DefaultSLOConfig,
		func(c SLOConfig, env Env) (Picker, error) { return picker(NewSLO(c, true, env.Now)) })
}

// DefaultSLOConfig returns no default target, least-request fallback, a
// one-minute window and 5 samples.
func DefaultSLOConfig() SLOConfig {
	return SLOConfig{Fallback: SLOFallbackLeastRequest, Window: time.Minute, MinSamples: 5}
}

// ValidateAt reports every invalid field, each named from path
// ("pools.fast.policy.slo" in a pool's config).
func (c SLOConfig) ValidateAt(path string) error {
	var errs []error
	if c.TTFTTarget < 0 || c.TTFTTarget > 10*time.Minute {
		errs = append(errs, fmt.Errorf("%s.ttft_target: must be in [0, 10m], got %v", path, c.TTFTTarget))
	}
	if c.Fallback != SLOFallbackLeastRequest && c.Fallback != SLOFallbackLeastPredicted {
		errs = append(errs, fmt.Errorf("%s.fallback: must be %q or %q, got %q",
			path, SLOFallbackLeastRequest, SLOFallbackLeastPredicted, c.Fallback))
	}
	if c.Window < time.Second || c.Window > time.Hour {
		errs = append(errs, fmt.Errorf("%s.window: must be in [1s, 1h], got %v", path, c.Window))
	}
	if c.MinSamples < 1 || c.MinSamples > 10_000 {
		errs = append(errs, fmt.Errorf("%s.min_samples: must be in [1, 10000], got %d", path, c.MinSamples))
	}
	return errors.Join(errs...)
}

// SLO picks, among the replicas predicted to meet the request's TTFT
// target, the least loaded (slo, slo-least-load) or the most loaded
// (slo-pack-load, which fills replicas up to the target and keeps the
// others free for requests with tighter targets), after AIBrix's SLO
// routers. Load is Candidate.InFlight; ties go round-robin.
//
// Target: Request.TTFTTarget, else SLOConfig.TTFTTarget. With neither, the
// pick is least-request.
//
// Signal: the replica's predicted TTFT at its current in-flight count,
// from a per-replica line fitted online to the gateway's own measurements
// (see ttftPredictor; the pool reports them through TTFTObserver, from
// streamed answers only). AIBrix instead reads a throughput capacity
// profiled offline per model and GPU; an online fit needs no profiling
// step and follows the replica as it is now.
//
// Staleness: samples fade with time constant Window, so a replica not
// measured for a few windows loses its fit. Missing signal: a replica
// without a fit is predicted by its scraped mean TTFT (Candidate.MeanTTFT,
// when fresh; it ignores load) and otherwise is predicted to meet the
// target, so new and idle-again replicas are tried and measured.
//
// When none is predicted to meet the target: SLOConfig.Fallback over all
// the candidates (least-request by default, as AIBrix's fallback router).
// There is no SLO queue. AIBrix holds requests that no pod can take within
// its capacity in a per-model queue; the gateway never queues without
// bound, so a request is always sent now, and the pool's bounded admission
// (429 when its queue is full, 503 when every replica is at its in-flight
// cap) is the only place one waits. AIBrix's slo-least-load-pulling, where
// replicas pull from that central queue as they free up, is not
// implemented for the same reason: it needs the queue, and a bounded one
// would only duplicate the pool's admission.
//
// Traces score candidates by predicted TTFT in seconds (0 for an
// unpredicted replica; lower is better), noted slo-met, slo-fallback or
// slo-no-target (then scored by InFlight).
//
// Concurrency: one mutex guards the fits, held for one decision's
// predictions or one observation; safe for concurrent use.
type SLO struct {
	traced
	target          time.Duration
	pack            bool
	leastPredicted  bool
	pred            *ttftPredictor
	rr, fallbackRot rotor
}

var (
	_ Picker       = (*SLO)(nil)
	_ TTFTObserver = (*SLO)(nil)
)

// NewSLO validates cfg and returns an SLO picker: slo-pack-load when pack,
// slo-least-load otherwise. now is the clock; nil means time.Now.
func NewSLO(cfg SLOConfig, pack bool, now func() time.Time) (*SLO, error) {
	if err := cfg.ValidateAt("slo"); err != nil {
		return nil, err
	}
	if now == nil {
		now = time.Now
	}
	return &SLO{
		target:         cfg.TTFTTarget,
		pack:           pack,
		leastPredicted: cfg.Fallback == SLOFallbackLeastPredicted,
		pred:           newTTFTPredictor(cfg.Window, cfg.MinSamples, now),
	}, nil
}

// ObserveTTFT implements TTFTObserver.
func (p *SLO) ObserveTTFT(_ *Request, replicaID string, inFlight int, ttft time.Duration) {
	p.pred.observe(replicaID, inFlight, ttft)
}

// Pick implements Picker.
func (p *SLO) Pick(req *Request, cands []Candidate) int {
	target := req.TTFTTarget
	if target <= 0 {
		target = p.target
	}
	if target <= 0 {
		chosen := leastInFlight(cands, &p.fallbackRot)
		if t := p.tracer; t != nil {
			t.Record(cands, inFlightScores(nil, cands), chosen, true, noteSLONoTarget)
		}
		return chosen
	}

	// Predictions in seconds; an unpredicted replica gets 0, which meets
	// any target.
	preds := make([]float64, len(cands))
	predict, unlock := p.pred.predictor()
	for i := range cands {
		c := &cands[i]
		if v, ok := predict(c.ID, c.InFlight); ok {
			preds[i] = v
		} else if c.Fresh && c.HasTTFT {
			preds[i] = c.MeanTTFT
		}
	}
	unlock()

	limit := target.Seconds()
	meets := func(i int) bool { return preds[i] <= limit }
	better := func(a, b int) bool { return a < b }
	if p.pack {
		better = func(a, b int) bool { return a > b }
	}
	load, count := 0, 0
	for i := range cands {
		switch n := cands[i].InFlight; {
		case !meets(i):
		case count == 0 || better(n, load):
			load, count = n, 1
		case n == load:
			count++
		}
	}
	var chosen int
	note := noteSLOMet
	switch {
	case count > 0:
		chosen = nthTied(len(cands), p.rr.turn(count), func(i int) bool { return meets(i) && cands[i].InFlight == load })
	case p.leastPredicted:
		note = noteSLOMiss
		chosen = p.leastPredictedIndex(preds, cands)
	default:
		note = noteSLOMiss
		chosen = leastInFlight(cands, &p.fallbackRot)
	}
	if t := p.tracer; t != nil {
		t.Record(cands, preds, chosen, true, note)
	}
	return chosen
}

// leastPredictedIndex returns the candidate with the smallest prediction,
// ties to the fewest in flight, then round-robin.
func (p *SLO) leastPredictedIndex(preds []float64, cands []Candidate) int {
	best, bestN, count := 0.0, 0, 0
	for i := range cands {
		switch v, n := preds[i], cands[i].InFlight; {
		case count == 0 || v < best || (v == best && n < bestN):
			best, bestN, count = v, n, 1
		case v == best && n == bestN:
			count++
		}
	}
	return nthTied(len(cands), p.fallbackRot.turn(count), func(i int) bool {
		return preds[i] == best && cands[i].InFlight == bestN
	})
}
