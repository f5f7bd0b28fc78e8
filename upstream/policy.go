package upstream

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync/atomic"
)

// Replica policy names, as written in config (PolicyConfig.Name).
const (
	PolicyLeastRequest = "least-request"
	PolicyPrefixCache  = "prefix-cache"
	PolicyLMetric      = "lmetric"
	PolicyWeighted     = "weighted"
	PolicyVTCBasic     = "vtc-basic"
	PolicyRoundRobin   = "round-robin"
	PolicyRandom       = "random"
)

// PolicyConfig selects and tunes a pool's replica policy. Every section is
// validated whichever policy is selected, so a config stays valid when
// only the name changes.
type PolicyConfig struct {
	// Name is one of PolicyNames(). Default "least-request".
	Name        string            `yaml:"name" json:"name"`
	PrefixCache PrefixCacheConfig `yaml:"prefix_cache" json:"prefix_cache"`
	LMetric     LMetricConfig     `yaml:"lmetric" json:"lmetric"`
	Weighted    WeightedConfig    `yaml:"weighted" json:"weighted"`
	VTC         VTCConfig         `yaml:"vtc" json:"vtc"`
	Random      RandomConfig      `yaml:"random" json:"random"`
	Trace       TraceConfig       `yaml:"trace" json:"trace"`
}

// DefaultPolicyConfig returns least-request with every section at its
// defaults. Decode YAML onto it so that omitted fields keep them.
func DefaultPolicyConfig() PolicyConfig {
	return PolicyConfig{
		Name:        PolicyLeastRequest,
		PrefixCache: DefaultPrefixCacheConfig(),
		LMetric:     DefaultLMetricConfig(),
		Weighted:    DefaultWeightedConfig(),
		VTC:         DefaultVTCConfig(),
		Trace:       DefaultTraceConfig(),
	}
}

// Validate reports every invalid field, each named from "policy"
// (for example "policy.prefix_cache.imbalance_count: must be >= 1, got 0").
func (c PolicyConfig) Validate() error { return c.ValidateAt("policy") }

// ValidateAt is Validate with field names rooted at path, for a caller that
// nests the config (for example "pools.slow.policy").
func (c PolicyConfig) ValidateAt(path string) error {
	var errs []error
	if _, ok := policies[c.Name]; !ok {
		errs = append(errs, fmt.Errorf("%s.name: unknown policy %q (want one of %s)",
			path, c.Name, strings.Join(PolicyNames(), ", ")))
	}
	errs = append(errs, c.PrefixCache.validate(path+".prefix_cache")...)
	errs = append(errs, c.LMetric.validate(path+".lmetric")...)
	errs = append(errs, c.Weighted.validate(path+".weighted")...)
	errs = append(errs, c.VTC.validate(path+".vtc")...)
	errs = append(errs, c.Trace.validate(path+".trace")...)
	return errors.Join(errs...)
}

// RandomConfig tunes the random policy.
type RandomConfig struct {
	// Seed fixes the random sequence (for reproducible benchmarks).
	// Default 0: a fresh seed per process.
	Seed uint64 `yaml:"seed" json:"seed"`
}

// policies is the registry NewPicker chooses from.
var policies = map[string]func(PolicyConfig) (Picker, error){
	PolicyLeastRequest: func(PolicyConfig) (Picker, error) { return NewLeastRequest(), nil },
	PolicyRoundRobin:   func(PolicyConfig) (Picker, error) { return NewRoundRobin(), nil },
	PolicyRandom:       func(c PolicyConfig) (Picker, error) { return NewRandom(c.Random.Seed), nil },
	PolicyPrefixCache:  func(c PolicyConfig) (Picker, error) { return NewPrefixCache(c.PrefixCache) },
	PolicyLMetric:      func(c PolicyConfig) (Picker, error) { return NewLMetric(c.LMetric) },
	PolicyWeighted:     func(c PolicyConfig) (Picker, error) { return NewWeighted(c.Weighted) },
	PolicyVTCBasic:     func(c PolicyConfig) (Picker, error) { return NewVTCBasic(c.VTC, nil) },
}

// PolicyNames lists the registered policy names, sorted.
func PolicyNames() []string { return slices.Sorted(maps.Keys(policies)) }

// NewPicker validates cfg and builds the policy it names, with a Tracer
// attached when cfg.Trace.Enabled (read it through Traceable). Pickers that
// learn from finished requests (lmetric, vtc-basic) also implement Finisher.
func NewPicker(cfg PolicyConfig) (Picker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p, err := policies[cfg.Name](cfg)
	if err != nil {
		return nil, fmt.Errorf("policy %s: %w", cfg.Name, err)
	}
	if cfg.Trace.Enabled {
		if s, ok := p.(interface{ SetTracer(*Tracer) }); ok {
			s.SetTracer(NewTracer(cfg.Trace.TopK, cfg.Trace.Capacity, nil))
		}
	}
	return p, nil
}

// rotor hands out turns for breaking ties round-robin, so that equal
// candidates share the work instead of the first one winning every time
// (seed 000: first-seen ties pin replica 0). Safe for concurrent use.
type rotor struct{ n atomic.Uint64 }

// turn returns which of count tied candidates to take, in [0, count).
// It advances only when there is a real tie.
func (r *rotor) turn(count int) int {
	if count <= 1 {
		return 0
	}
	return int((r.n.Add(1) - 1) % uint64(count))
}

// nthTied returns the index i in [0, n) of the k-th (from 0) i for which
// tied(i) holds, or -1 when there are not that many.
func nthTied(n, k int, tied func(i int) bool) int {
	for i := range n {
		if tied(i) {
			if k == 0 {
				return i
			}
			k--
		}
	}
	return -1
}

// growFloats returns buf resized to n, reallocating only when too small.
func growFloats(buf []float64, n int) []float64 {
	if cap(buf) < n {
		return make([]float64, n)
	}
	return buf[:n]
}

// inFlightScores fills buf with each candidate's InFlight, the score the
// load-only policies are traced with (lower is better).
func inFlightScores(buf []float64, cands []Candidate) []float64 {
	buf = growFloats(buf, len(cands))
	for i, c := range cands {
		buf[i] = float64(c.InFlight)
	}
	return buf
}

// validNonNeg reports whether v is a finite number >= 0.
func validNonNeg(v float64) bool { return v >= 0 && !math.IsInf(v, 1) }

// validPos reports whether v is a finite number > 0.
func validPos(v float64) bool { return v > 0 && !math.IsInf(v, 1) }

// validateBlocks checks the block size and per-replica index bound shared
// by the prefix-aware policies.
func validateBlocks(path string, blockChars, indexBlocks int) []error {
	var errs []error
	if blockChars < 1 {
		errs = append(errs, fmt.Errorf("%s.block_chars: must be >= 1, got %d", path, blockChars))
	}
	if indexBlocks < 1 || indexBlocks > maxIndexBlocks {
		errs = append(errs, fmt.Errorf("%s.index_blocks: must be in [1, %d], got %d", path, maxIndexBlocks, indexBlocks))
	}
	return errs
}
