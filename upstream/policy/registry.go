package policy

import (
	"fmt"
	"maps"
	"slices"
)

// Replica policy names, as written in config (Config.Name).
const (
	nameLeastRequest = "least-request"
	namePrefixCache  = "prefix-cache"
	nameLMetric      = "lmetric"
	nameWeighted     = "weighted"
	nameVTCBasic     = "vtc-basic"
	nameRoundRobin   = "round-robin"
	nameRandom       = "random"
)

// policies is the registry New chooses from.
var policies = map[string]func(Config) (Picker, error){
	nameLeastRequest: func(Config) (Picker, error) { return NewLeastRequest(), nil },
	nameRoundRobin:   func(Config) (Picker, error) { return NewRoundRobin(), nil },
	nameRandom:       func(c Config) (Picker, error) { return NewRandom(c.Random.Seed), nil },
	namePrefixCache:  func(c Config) (Picker, error) { return NewPrefixCache(c.PrefixCache) },
	nameLMetric:      func(c Config) (Picker, error) { return NewLMetric(c.LMetric) },
	nameWeighted:     func(c Config) (Picker, error) { return NewWeighted(c.Weighted) },
	nameVTCBasic:     func(c Config) (Picker, error) { return NewVTCBasic(c.VTC, nil) },
}

// Names lists the registered policy names, sorted.
func Names() []string { return slices.Sorted(maps.Keys(policies)) }

// New validates cfg and builds the policy it names, with a Tracer
// attached when cfg.Trace.Enabled (read it through Traceable). Pickers that
// learn from finished requests (lmetric, vtc-basic) also implement Finisher.
func New(cfg Config) (Picker, error) {
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
