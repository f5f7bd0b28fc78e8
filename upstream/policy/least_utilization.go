package policy

import (
	"errors"
	"fmt"
)

// LeastUtilizationConfig tunes the least-utilization policy.
type LeastUtilizationConfig struct {
	// MaxNumSeqs is the replicas' batch capacity, vLLM's --max-num-seqs:
	// Running/MaxNumSeqs is the share of batch slots in use. vLLM exports
	// no gauge of it, so set it to what the replicas run with. Default 256.
	MaxNumSeqs int `yaml:"max_num_seqs" json:"max_num_seqs"`
}

func init() {
	register("least-utilization", "least_utilization", DefaultLeastUtilizationConfig,
		func(c LeastUtilizationConfig, _ Env) (Picker, error) { return picker(NewLeastUtilization(c)) })
}

// DefaultLeastUtilizationConfig returns a batch capacity of 256 sequences.
func DefaultLeastUtilizationConfig() LeastUtilizationConfig {
	return LeastUtilizationConfig{MaxNumSeqs: 256}
}

// ValidateAt reports every invalid field, each named from path
// ("pools.fast.policy.least_utilization" in a pool's config).
func (c LeastUtilizationConfig) ValidateAt(path string) error {
	var errs []error
	if c.MaxNumSeqs < 1 || c.MaxNumSeqs > 1<<20 {
		errs = append(errs, fmt.Errorf("%s.max_num_seqs: must be in [1, %d], got %d", path, 1<<20, c.MaxNumSeqs))
	}
	return errors.Join(errs...)
}

// LeastUtilization picks the candidate whose engine is least utilised,
// after AIBrix's least-utilization router.
//
// Signal: the engine's utilisation as the larger of its two capacities in
// use, max(KVUtilization, Running/MaxNumSeqs), from the scraped gauges
// vllm:kv_cache_usage_perc and vllm:num_requests_running. AIBrix reads an
// engine_utilization gauge that only xLLM exports; vLLM has no such gauge,
// and an engine is full when either its KV cache or its batch slots are, so
// the scarcer of the two stands for it. An engine that exports no KV-cache
// usage (KVUnknown: llama.cpp, TGI) is judged by its batch slots alone.
//
// Staleness: up to three scrape intervals, like every scraped value; the
// value does not move between scrapes.
//
// Ties: fewest in-flight requests, then round-robin (an idle pool, where
// every replica reads 0, is spread like least-request). Missing or stale
// signal (a candidate with Fresh false): least-request over all the
// candidates (see pickLowest).
//
// Concurrency: lock-free; safe for concurrent Pick.
type LeastUtilization struct {
	traced
	seqs float64
	rr   rotor
}

var _ Picker = (*LeastUtilization)(nil)

// NewLeastUtilization validates cfg and returns a least-utilization picker.
func NewLeastUtilization(cfg LeastUtilizationConfig) (*LeastUtilization, error) {
	if err := cfg.ValidateAt("least_utilization"); err != nil {
		return nil, err
	}
	return &LeastUtilization{seqs: float64(cfg.MaxNumSeqs)}, nil
}

// Pick implements Picker.
func (p *LeastUtilization) Pick(_ *Request, cands []Candidate) int {
	return pickLowest(cands, p.utilization, &p.rr, p.tracer)
}

func (p *LeastUtilization) utilization(c *Candidate) (float64, bool) {
	u := float64(c.Running) / p.seqs
	if !c.KVUnknown {
		u = max(u, c.KVUtilization)
	}
	return u, c.Fresh
}
