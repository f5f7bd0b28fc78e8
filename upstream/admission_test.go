package upstream

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/triage-gw/triage/upstream/policy"
)

func TestNewAdmitter(t *testing.T) {
	tests := []struct {
		name string
		want Admitter
	}{
		{AdmitAlways, AlwaysAdmit{}},
		{AdmitRejectAll, RejectAll{}},
		{AdmitTokenBucket, (*TokenBucket)(nil)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultAdmissionConfig()
			cfg.Name = tt.name
			a, err := NewAdmitter(cfg)
			require.NoError(t, err)
			require.IsType(t, tt.want, a)
		})
	}
	t.Run("unknown", func(t *testing.T) {
		cfg := DefaultAdmissionConfig()
		cfg.Name = "leaky-bucket"
		_, err := NewAdmitter(cfg)
		require.EqualError(t, err, `admission.name: unknown admission policy "leaky-bucket" (want one of always-admit, reject-all, token-bucket)`)
	})
}

func TestAlwaysAndRejectAll(t *testing.T) {
	req := &policy.Request{InputTokens: 1 << 30}
	require.NoError(t, AlwaysAdmit{}.Admit(req))
	require.ErrorIs(t, RejectAll{}.Admit(req), ErrRejected)
}

func TestDefaultAdmissionConfigIsValid(t *testing.T) {
	require.NoError(t, DefaultAdmissionConfig().Validate())
}

func TestTokenBucket(t *testing.T) {
	clock := newFakeClock()
	b, err := NewTokenBucket(TokenBucketConfig{Capacity: 100, RefillPerSecond: 10}, clock.Now)
	require.NoError(t, err)
	admit := func(tokens int) error { return b.Admit(&policy.Request{InputTokens: tokens}) }

	require.NoError(t, admit(60), "starts full")
	require.NoError(t, admit(40))
	require.ErrorIs(t, admit(1), ErrRejected, "empty")
	require.ErrorIs(t, admit(101), ErrRejected, "never fits")
	require.ErrorContains(t, admit(101), "costs more than")

	clock.Advance(2 * time.Second) // +20
	require.InDelta(t, 20, b.Available(), 1e-9)
	require.ErrorIs(t, admit(25), ErrRejected)
	require.InDelta(t, 20, b.Available(), 1e-9, "a rejected request takes nothing")
	require.NoError(t, admit(20))

	clock.Advance(500 * time.Millisecond) // +5
	require.NoError(t, admit(5))
	require.ErrorIs(t, admit(1), ErrRejected)

	clock.Advance(time.Hour)
	require.InDelta(t, 100, b.Available(), 1e-9, "refill stops at capacity")
	require.NoError(t, admit(100))

	require.NoError(t, admit(0), "a free request always passes")
	clock.Advance(-time.Minute) // a clock stepping back refills nothing
	require.InDelta(t, 0, b.Available(), 1e-9)
}

func TestAdmissionConfigValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*AdmissionConfig)
		want   []string
	}{
		{"zero capacity", func(c *AdmissionConfig) { c.TokenBucket.Capacity = 0 },
			[]string{"admission.token_bucket.capacity: must be a finite number > 0, got 0"}},
		{"negative refill", func(c *AdmissionConfig) { c.TokenBucket.RefillPerSecond = -5 },
			[]string{"admission.token_bucket.refill_per_second: must be a finite number > 0, got -5"}},
		{"all at once", func(c *AdmissionConfig) { c.Name = ""; c.TokenBucket.Capacity = -1; c.TokenBucket.RefillPerSecond = 0 },
			[]string{"admission.name", "admission.token_bucket.capacity", "admission.token_bucket.refill_per_second"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultAdmissionConfig()
			tt.mutate(&cfg)
			err := cfg.Validate()
			require.Error(t, err)
			lines := strings.Split(err.Error(), "\n")
			require.Len(t, lines, len(tt.want))
			for i, w := range tt.want {
				require.Contains(t, lines[i], w)
			}
		})
	}
	_, err := NewTokenBucket(TokenBucketConfig{}, nil)
	require.ErrorContains(t, err, "token_bucket.capacity")
}

func TestTokenBucketConcurrent(t *testing.T) {
	clock := newFakeClock()
	b, err := NewTokenBucket(TokenBucketConfig{Capacity: 1000, RefillPerSecond: 1}, clock.Now)
	require.NoError(t, err)
	admitted := make(chan bool, 400)
	for range 4 {
		go func() {
			for range 100 {
				admitted <- b.Admit(&policy.Request{InputTokens: 5}) == nil
			}
		}()
	}
	n := 0
	for range 400 {
		if <-admitted {
			n++
		}
	}
	require.Equal(t, 200, n, "exactly capacity/cost requests pass")
}

func TestErrorsWrapRejected(t *testing.T) {
	for _, err := range []error{errRejectAll, errBucketEmpty, errBucketTooSmall} {
		require.True(t, errors.Is(err, ErrRejected), err.Error())
	}
}

// fakeClock is a manual clock for admitters that read time.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}
