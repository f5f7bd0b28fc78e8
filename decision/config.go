package decision

import (
	"errors"
	"fmt"
	"time"
)

// Policy names accepted in Config.Policy.
const (
	PolicyQuadratic = "quadratic"
	PolicyGreyZone  = "grey-zone"
)

// Units accepted in Config.ShareUnit: what the slow-share cap counts.
const (
	ShareUnitRequests = "requests"
	ShareUnitTokens   = "tokens"
)

// Config selects and tunes the fast-or-slow policy. Every field is validated, including those of
// the policy not selected, so a typo never waits for the day someone switches policies.
type Config struct {
	// Policy is "quadratic" (default) or "grey-zone".
	Policy string `yaml:"policy"`
	// Base is the quadratic threshold at zero load, in (0, 1). Default 0.5.
	Base float64 `yaml:"base"`
	// Alpha is how far the quadratic threshold rises at full load, >= 0 with Base+Alpha <= 1.
	// Default 0.45 (full load needs P(slow) > 0.95).
	Alpha float64 `yaml:"alpha"`
	// MaxSlowConcurrency is the slow-path semaphore's size, >= 1. Default 50.
	MaxSlowConcurrency int `yaml:"max_slow_concurrency"`
	// GreyLow and GreyHigh bound the grey zone (inclusive): 0 <= GreyLow < GreyHigh <= 1. The
	// zone should contain the model's label threshold (0.5 for the shipped model). Defaults
	// 0.45 and 0.55.
	GreyLow  float64 `yaml:"grey_low"`
	GreyHigh float64 `yaml:"grey_high"`
	// HighQueue: in the grey zone, a batcher queue longer than this goes fast. Default 10.
	HighQueue int `yaml:"high_queue"`
	// LowQueue: in the grey zone, a batcher queue shorter than this goes slow; 0 <= LowQueue <=
	// HighQueue. Default 3.
	LowQueue int `yaml:"low_queue"`
	// MaxSlowShare caps the share of routed requests (or of their tokens, see ShareUnit)
	// that go slow over ShareWindow, in [0, 1); 0 (the default) sets no cap. See ShareCap.
	MaxSlowShare float64 `yaml:"max_slow_share"`
	// ShareWindow is the sliding window the slow share is kept within, in [10s, 24h].
	// Default 5m.
	ShareWindow time.Duration `yaml:"share_window"`
	// ShareUnit is what the share counts: "requests" (default), each routed request once, or
	// "tokens", each weighted by its prompt and completion tokens. See ShareCap.
	ShareUnit string `yaml:"share_unit"`
}

// DefaultConfig returns the original Triage design's values (docs/sources.md): quadratic
// policy, base 0.5, alpha 0.45, 50 slow slots; grey zone [0.45, 0.55] with queue bounds 3
// and 10.
func DefaultConfig() Config {
	return Config{
		Policy:             PolicyQuadratic,
		Base:               0.5,
		Alpha:              0.45,
		MaxSlowConcurrency: 50,
		GreyLow:            0.45,
		GreyHigh:           0.55,
		HighQueue:          10,
		LowQueue:           3,
		ShareWindow:        5 * time.Minute,
		ShareUnit:          ShareUnitRequests,
	}
}

// Validate is ValidateAt("decision").
func (c Config) Validate() error { return c.ValidateAt("decision") }

// ValidateAt reports every invalid field, each error naming it from path ("decision.alpha").
func (c Config) ValidateAt(path string) error {
	var errs []error
	if c.Policy != PolicyQuadratic && c.Policy != PolicyGreyZone {
		errs = append(errs, fmt.Errorf("%s.policy: must be %q or %q, got %q", path, PolicyQuadratic, PolicyGreyZone, c.Policy))
	}
	baseOK := c.Base > 0 && c.Base < 1 // also false for NaN
	if !baseOK {
		errs = append(errs, fmt.Errorf("%s.base: must be in (0, 1), got %v", path, c.Base))
	}
	alphaOK := c.Alpha >= 0
	if !alphaOK {
		errs = append(errs, fmt.Errorf("%s.alpha: must be >= 0, got %v", path, c.Alpha))
	}
	// At full load the threshold is base+alpha; above 1 no P(slow) could pass it. The epsilon
	// keeps sums like 0.55+0.45 from failing on float rounding.
	if baseOK && alphaOK && c.Base+c.Alpha > 1+1e-12 {
		errs = append(errs, fmt.Errorf("%s.alpha: base+alpha must be <= 1 or nothing can go slow at full load, got %v+%v", path, c.Base, c.Alpha))
	}
	if c.MaxSlowConcurrency < 1 {
		errs = append(errs, fmt.Errorf("%s.max_slow_concurrency: must be >= 1, got %d", path, c.MaxSlowConcurrency))
	}
	if !(c.GreyLow >= 0 && c.GreyLow <= 1) {
		errs = append(errs, fmt.Errorf("%s.grey_low: must be in [0, 1], got %v", path, c.GreyLow))
	}
	if !(c.GreyHigh >= 0 && c.GreyHigh <= 1) {
		errs = append(errs, fmt.Errorf("%s.grey_high: must be in [0, 1], got %v", path, c.GreyHigh))
	}
	if c.GreyLow >= c.GreyHigh {
		errs = append(errs, fmt.Errorf("%s.grey_high: must be > grey_low (%v), got %v", path, c.GreyLow, c.GreyHigh))
	}
	if c.LowQueue < 0 {
		errs = append(errs, fmt.Errorf("%s.low_queue: must be >= 0, got %d", path, c.LowQueue))
	}
	if c.HighQueue < c.LowQueue {
		errs = append(errs, fmt.Errorf("%s.high_queue: must be >= low_queue (%d), got %d", path, c.LowQueue, c.HighQueue))
	}
	if !(c.MaxSlowShare >= 0 && c.MaxSlowShare < 1) {
		errs = append(errs, fmt.Errorf("%s.max_slow_share: must be in [0, 1) (0 sets no cap), got %v", path, c.MaxSlowShare))
	}
	if c.ShareWindow < 10*time.Second || c.ShareWindow > 24*time.Hour {
		errs = append(errs, fmt.Errorf("%s.share_window: must be in [10s, 24h], got %s", path, c.ShareWindow))
	}
	if c.ShareUnit != ShareUnitRequests && c.ShareUnit != ShareUnitTokens {
		errs = append(errs, fmt.Errorf("%s.share_unit: must be %q or %q, got %q", path, ShareUnitRequests, ShareUnitTokens, c.ShareUnit))
	}
	return errors.Join(errs...)
}

// NewPolicy validates cfg and builds the policy it selects.
func NewPolicy(cfg Config) (Policy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Policy == PolicyGreyZone {
		return &GreyZone{Low: cfg.GreyLow, High: cfg.GreyHigh, HighQueue: cfg.HighQueue, LowQueue: cfg.LowQueue}, nil
	}
	return &Quadratic{Base: cfg.Base, Alpha: cfg.Alpha}, nil
}
