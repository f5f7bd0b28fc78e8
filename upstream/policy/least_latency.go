package policy

import (
	"errors"
	"fmt"
)

// LeastLatencyConfig tunes the least-latency policy.
type LeastLatencyConfig struct {
	// OutputTokens is how many output tokens a request is expected to
	// produce: the expected latency is MeanTTFT + OutputTokens × MeanTPOT.
	// 0 ranks by TTFT alone. Default 100, the guess AIBrix's least-latency
	// router uses when it has no data.
	OutputTokens int `yaml:"output_tokens" json:"output_tokens"`
}

func init() {
	register("least-latency", "least_latency", DefaultLeastLatencyConfig,
		func(c LeastLatencyConfig, _ Env) (Picker, error) { return picker(NewLeastLatency(c)) })
}

// DefaultLeastLatencyConfig returns 100 expected output tokens.
func DefaultLeastLatencyConfig() LeastLatencyConfig { return LeastLatencyConfig{OutputTokens: 100} }

// ValidateAt reports every invalid field, each named from path
// ("pools.fast.policy.least_latency" in a pool's config).
func (c LeastLatencyConfig) ValidateAt(path string) error {
	var errs []error
	if c.OutputTokens < 0 || c.OutputTokens > 1<<20 {
		errs = append(errs, fmt.Errorf("%s.output_tokens: must be in [0, %d], got %d", path, 1<<20, c.OutputTokens))
	}
	return errors.Join(errs...)
}

// LeastLatency picks the candidate with the lowest expected latency,
// MeanTTFT + OutputTokens × MeanTPOT, after AIBrix's least-latency router
// (which adds mean queue, prefill and decode times, each scaled to the
// pool's average request size).
//
// Signal: vLLM's own histograms, scraped from the replica's /metrics:
// vllm:time_to_first_token_seconds and vllm:inter_token_latency_seconds
// (older vLLM: vllm:time_per_output_token_seconds), as mean values
// over the latest scrape interval that finished requests (see Candidate).
// They are preferred to the gateway's own measurements because the
// replica measures every request it serves, from every gateway of a fleet
// and every other client, so all gateways rank replicas alike; because it
// measures TTFT and TPOT of non-streamed requests too, where the gateway
// sees only the whole response; and because they need no state in the
// policy and share the one staleness rule of the scraped signals.
//
// Staleness: a mean covers the latest scrape interval in which the replica
// produced tokens and is up to three scrape intervals old. An idle replica
// keeps the mean it had when it last worked, which is what draws traffic
// back to it once the busy ones get slower than that.
//
// Ties: fewest in-flight requests, then round-robin. Missing or stale
// signal (Fresh false, no TTFT yet, or no TPOT yet while OutputTokens > 0:
// a replica that has finished nothing since the gateway started scraping):
// least-request over all the candidates (see pickLowest), which soon gives
// every replica a measurement.
//
// Concurrency: lock-free; safe for concurrent Pick.
type LeastLatency struct {
	traced
	outputTokens float64
	rr           rotor
}

var _ Picker = (*LeastLatency)(nil)

// NewLeastLatency validates cfg and returns a least-latency picker.
func NewLeastLatency(cfg LeastLatencyConfig) (*LeastLatency, error) {
	if err := cfg.ValidateAt("least_latency"); err != nil {
		return nil, err
	}
	return &LeastLatency{outputTokens: float64(cfg.OutputTokens)}, nil
}

// Pick implements Picker.
func (p *LeastLatency) Pick(_ *Request, cands []Candidate) int {
	return pickLowest(cands, p.expectedLatency, &p.rr, p.tracer)
}

func (p *LeastLatency) expectedLatency(c *Candidate) (float64, bool) {
	ok := c.Fresh && c.HasTTFT && (c.HasTPOT || p.outputTokens == 0)
	v := c.MeanTTFT
	if p.outputTokens > 0 {
		v += p.outputTokens * c.MeanTPOT
	}
	return v, ok
}
