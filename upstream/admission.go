package upstream

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/triage-gw/triage/upstream/policy"
)

// ErrRejected is returned by an Admitter that refuses a request.
var ErrRejected = errors.New("request rejected by admission policy")

// Admitter decides whether a request may enter a pool at all.
type Admitter interface {
	// Admit returns nil or ErrRejected. It must not block.
	Admit(req *policy.Request) error
}

// Admission policy names, as written in config (AdmissionConfig.Name).
const (
	AdmitAlways      = "always-admit"
	AdmitTokenBucket = "token-bucket"
	AdmitRejectAll   = "reject-all"
)

var admissionNames = []string{AdmitAlways, AdmitRejectAll, AdmitTokenBucket} // sorted

// AdmissionConfig selects the admission policy run before routing (BLIS).
type AdmissionConfig struct {
	// Name is "always-admit", "token-bucket" or "reject-all" (for tests).
	// Default "always-admit".
	Name        string            `yaml:"name" json:"name"`
	TokenBucket TokenBucketConfig `yaml:"token_bucket" json:"token_bucket"`
}

// TokenBucketConfig tunes the token-bucket admitter. Each request costs
// its InputTokens; the bucket starts full.
type TokenBucketConfig struct {
	// Capacity is the most tokens the bucket holds, so the largest burst
	// admitted at once; a request costing more is always rejected.
	// Default 100000.
	Capacity float64 `yaml:"capacity" json:"capacity"`
	// RefillPerSecond is how many tokens flow back each second. Default 10000.
	RefillPerSecond float64 `yaml:"refill_per_second" json:"refill_per_second"`
}

// DefaultAdmissionConfig returns always-admit with token-bucket defaults.
func DefaultAdmissionConfig() AdmissionConfig {
	return AdmissionConfig{
		Name:        AdmitAlways,
		TokenBucket: TokenBucketConfig{Capacity: 100_000, RefillPerSecond: 10_000},
	}
}

// Validate reports every invalid field, each named from "admission".
func (c AdmissionConfig) Validate() error { return c.ValidateAt("admission") }

// ValidateAt is Validate with field names rooted at path.
func (c AdmissionConfig) ValidateAt(path string) error {
	var errs []error
	if !slices.Contains(admissionNames, c.Name) {
		errs = append(errs, fmt.Errorf("%s.name: unknown admission policy %q (want one of %s)",
			path, c.Name, strings.Join(admissionNames, ", ")))
	}
	errs = append(errs, c.TokenBucket.validate(path+".token_bucket")...)
	return errors.Join(errs...)
}

// Validate reports every invalid field, named from "token_bucket".
func (c TokenBucketConfig) Validate() error { return errors.Join(c.validate("token_bucket")...) }

func (c TokenBucketConfig) validate(path string) []error {
	var errs []error
	if !validPos(c.Capacity) {
		errs = append(errs, fmt.Errorf("%s.capacity: must be a finite number > 0, got %v", path, c.Capacity))
	}
	if !validPos(c.RefillPerSecond) {
		errs = append(errs, fmt.Errorf("%s.refill_per_second: must be a finite number > 0, got %v", path, c.RefillPerSecond))
	}
	return errs
}

// NewAdmitter validates cfg and builds the admitter it names.
func NewAdmitter(cfg AdmissionConfig) (Admitter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	switch cfg.Name {
	case AdmitTokenBucket:
		return NewTokenBucket(cfg.TokenBucket, nil)
	case AdmitRejectAll:
		return RejectAll{}, nil
	default:
		return AlwaysAdmit{}, nil
	}
}

// AlwaysAdmit admits every request.
type AlwaysAdmit struct{}

var _ Admitter = AlwaysAdmit{}

// Admit implements Admitter.
func (AlwaysAdmit) Admit(*policy.Request) error { return nil }

// RejectAll rejects every request (for tests of the rejection path).
type RejectAll struct{}

var _ Admitter = RejectAll{}

var errRejectAll = fmt.Errorf("%w: reject-all", ErrRejected)

// Admit implements Admitter.
func (RejectAll) Admit(*policy.Request) error { return errRejectAll }

// The token bucket's rejections, built once so Admit never allocates.
var (
	errBucketEmpty    = fmt.Errorf("%w: token bucket empty", ErrRejected)
	errBucketTooSmall = fmt.Errorf("%w: request costs more than the token bucket holds", ErrRejected)
)

// TokenBucket admits a request when the bucket holds at least its
// InputTokens, and takes them out. Tokens flow back at RefillPerSecond up
// to Capacity. A rejected request takes nothing.
//
// Concurrency: safe for concurrent Admit; a short mutex, no waiting.
type TokenBucket struct {
	capacity, rate float64
	now            func() time.Time

	mu     sync.Mutex
	tokens float64
	last   time.Time
}

var _ Admitter = (*TokenBucket)(nil)

// NewTokenBucket validates cfg and returns a full bucket. now is the clock;
// nil means time.Now.
func NewTokenBucket(cfg TokenBucketConfig, now func() time.Time) (*TokenBucket, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if now == nil {
		now = time.Now
	}
	return &TokenBucket{capacity: cfg.Capacity, rate: cfg.RefillPerSecond, now: now, tokens: cfg.Capacity, last: now()}, nil
}

// Admit implements Admitter. It returns an error wrapping ErrRejected.
func (b *TokenBucket) Admit(req *policy.Request) error {
	cost := float64(max(req.InputTokens, 0))
	if cost > b.capacity {
		return errBucketTooSmall
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill()
	if b.tokens < cost {
		return errBucketEmpty
	}
	b.tokens -= cost
	return nil
}

// Available returns the tokens in the bucket now.
func (b *TokenBucket) Available() float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill()
	return b.tokens
}

// refill adds the tokens earned since the last call. Caller holds b.mu.
func (b *TokenBucket) refill() {
	now := b.now()
	if dt := now.Sub(b.last); dt > 0 {
		b.tokens = min(b.capacity, b.tokens+dt.Seconds()*b.rate)
		b.last = now
	}
}

// validPos reports whether v is a finite number > 0.
func validPos(v float64) bool { return v > 0 && !math.IsInf(v, 1) }
