package policy

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// Config selects and tunes a pool's replica policy. Every section is
// validated whichever policy is selected, so a config stays valid when
// only the name changes.
type Config struct {
	// Name is one of Names(). Default "least-request".
	Name        string            `yaml:"name" json:"name"`
	PrefixCache PrefixCacheConfig `yaml:"prefix_cache" json:"prefix_cache"`
	LMetric     LMetricConfig     `yaml:"lmetric" json:"lmetric"`
	Weighted    WeightedConfig    `yaml:"weighted" json:"weighted"`
	VTC         VTCConfig         `yaml:"vtc" json:"vtc"`
	Random      RandomConfig      `yaml:"random" json:"random"`
	Trace       TraceConfig       `yaml:"trace" json:"trace"`
}

// DefaultConfig returns least-request with every section at its
// defaults. Decode YAML onto it so that omitted fields keep them.
func DefaultConfig() Config {
	return Config{
		Name:        nameLeastRequest,
		PrefixCache: DefaultPrefixCacheConfig(),
		LMetric:     DefaultLMetricConfig(),
		Weighted:    DefaultWeightedConfig(),
		VTC:         DefaultVTCConfig(),
		Trace:       DefaultTraceConfig(),
	}
}

// Validate reports every invalid field, each named from "policy"
// (for example "policy.prefix_cache.imbalance_count: must be >= 1, got 0").
func (c Config) Validate() error { return c.ValidateAt("policy") }

// ValidateAt is Validate with field names rooted at path, for a caller that
// nests the config (for example "pools.slow.policy").
func (c Config) ValidateAt(path string) error {
	var errs []error
	if _, ok := policies[c.Name]; !ok {
		errs = append(errs, fmt.Errorf("%s.name: unknown policy %q (want one of %s)",
			path, c.Name, strings.Join(Names(), ", ")))
	}
	errs = append(errs, c.PrefixCache.validate(path+".prefix_cache")...)
	errs = append(errs, c.LMetric.validate(path+".lmetric")...)
	errs = append(errs, c.Weighted.validate(path+".weighted")...)
	errs = append(errs, c.VTC.validate(path+".vtc")...)
	errs = append(errs, c.Trace.validate(path+".trace")...)
	return errors.Join(errs...)
}

// validNonNeg reports whether v is a finite number >= 0.
func validNonNeg(v float64) bool { return v >= 0 && !math.IsInf(v, 1) }

// validPos reports whether v is a finite number > 0.
func validPos(v float64) bool { return v > 0 && !math.IsInf(v, 1) }
