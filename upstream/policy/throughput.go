package policy

import (
	"errors"
	"fmt"
)

// ThroughputConfig tunes the throughput policy.
type ThroughputConfig struct {
	// PromptTokenWeight weighs a prompt token against an output token in
	// the replica's recent throughput. Default 1: plain tokens per second.
	// AIBrix's throughput router weighs prompt tokens 2.
	PromptTokenWeight float64 `yaml:"prompt_token_weight" json:"prompt_token_weight"`
}

func init() {
	register("throughput", "throughput", DefaultThroughputConfig,
		func(c ThroughputConfig, _ Env) (Picker, error) { return picker(NewThroughput(c)) })
}

// DefaultThroughputConfig returns prompt and output tokens weighed alike.
func DefaultThroughputConfig() ThroughputConfig { return ThroughputConfig{PromptTokenWeight: 1} }

// ValidateAt reports every invalid field, each named from path
// ("pools.fast.policy.throughput" in a pool's config).
func (c ThroughputConfig) ValidateAt(path string) error {
	var errs []error
	if !validNonNeg(c.PromptTokenWeight) {
		errs = append(errs, fmt.Errorf("%s.prompt_token_weight: must be a finite number >= 0, got %v", path, c.PromptTokenWeight))
	}
	return errors.Join(errs...)
}

// Throughput picks the candidate that processed the fewest tokens per
// second recently, after AIBrix's throughput router: the replica doing the
// least work is taken to have the most room.
//
// Signal: PromptTokenWeight × PromptTokensPerSec + GenerationTokensPerSec,
// the rates of vLLM's counters vllm:prompt_tokens_total and
// vllm:generation_tokens_total between the replica's two latest scrapes.
// (AIBrix's router, despite its name, reads each pod's average prompt and
// output tokens per request over a day, through Prometheus; the rates are
// what the name promises and need nothing but the replica's /metrics.)
// Throughput measures work done, not room left: a replica that is slow per
// token reads low and draws more requests. Weigh it against least-latency
// on heterogeneous replicas.
//
// Staleness: the rate covers the interval between the two latest scrapes
// (one scrape interval, longer after failed scrapes) and is up to three
// scrape intervals old.
//
// Ties: fewest in-flight requests, then round-robin (an idle pool, where
// every replica reads 0, is spread like least-request). Missing or stale
// signal (Fresh false, or no rate yet: before a replica's second scrape and
// right after its counters restart): least-request over all the candidates
// (see pickLowest).
//
// Concurrency: lock-free; safe for concurrent Pick.
type Throughput struct {
	traced
	promptWeight float64
	rr           rotor
}

var _ Picker = (*Throughput)(nil)

// NewThroughput validates cfg and returns a throughput picker.
func NewThroughput(cfg ThroughputConfig) (*Throughput, error) {
	if err := cfg.ValidateAt("throughput"); err != nil {
		return nil, err
	}
	return &Throughput{promptWeight: cfg.PromptTokenWeight}, nil
}

// Pick implements Picker.
func (p *Throughput) Pick(_ *Request, cands []Candidate) int {
	return pickLowest(cands, p.tokensPerSec, &p.rr, p.tracer)
}

func (p *Throughput) tokensPerSec(c *Candidate) (float64, bool) {
	return p.promptWeight*c.PromptTokensPerSec + c.GenerationTokensPerSec, c.Fresh && c.Rates
}
