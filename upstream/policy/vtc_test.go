package policy

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func newTestVTC(t *testing.T, clock *fakeClock) *VTCBasic {
	t.Helper()
	p, err := NewVTCBasic(DefaultVTCConfig(), clock.Now)
	require.NoError(t, err)
	p.SetTracer(NewTracer(8, 16, nil))
	return p
}

func TestVTCFairnessOverTime(t *testing.T) {
	clock := newFakeClock()
	p := newTestVTC(t, clock)
	cs := cands(0, 0, 0)
	light := func() string { return cs[p.Pick(&Request{User: "light", InputTokens: 10}, cs)].ID }
	heavy := func() string { return cs[p.Pick(&Request{User: "heavy", InputTokens: 4000}, cs)].ID }

	// Nobody has used anything: everyone starts on the first replica.
	require.Equal(t, "r0", light())
	require.Equal(t, "r0", heavy())

	// heavy now has 4000 tokens against light's 10: bucket max(1000,
	// (10+4000)/2) = 2005, position min(4000/2005, 2) ≈ 1.995 → r2.
	require.Equal(t, "r2", heavy())
	for range 5 {
		clock.Advance(5 * time.Second)
		require.Equal(t, "r0", light(), "the light user keeps its replica")
		require.Equal(t, "r2", heavy(), "the heavy user is kept off it")
	}
	require.InDelta(t, 7*4000, p.Usage("heavy"), 1e-9)

	// A minute after heavy's last request its tokens have left the window.
	clock.Advance(61 * time.Second)
	require.Zero(t, p.Usage("heavy"))
	require.Equal(t, "r0", heavy())
}

func TestVTCWindowSlides(t *testing.T) {
	clock := newFakeClock()
	p := newTestVTC(t, clock)
	cs := cands(0, 0)
	p.Pick(&Request{User: "u", InputTokens: 100}, cs)
	clock.Advance(30 * time.Second)
	p.Pick(&Request{User: "u", InputTokens: 50}, cs)
	require.InDelta(t, 150, p.Usage("u"), 1e-9)
	clock.Advance(35 * time.Second) // 65 s after the first, 35 s after the second
	require.InDelta(t, 50, p.Usage("u"), 1e-9)
	clock.Advance(30 * time.Second)
	require.Zero(t, p.Usage("u"))

	// Swept users are forgotten entirely.
	p.Pick(&Request{User: "other", InputTokens: 1}, cs)
	p.mu.Lock()
	_, kept := p.users["u"]
	p.mu.Unlock()
	require.False(t, kept)
}

func TestVTCOutputTokensWeighDouble(t *testing.T) {
	clock := newFakeClock()
	p := newTestVTC(t, clock)
	req := &Request{User: "u", InputTokens: 100}
	k := p.Pick(req, cands(0, 0))
	require.InDelta(t, 100, p.Usage("u"), 1e-9)
	p.Done(req, cands(0, 0)[k].ID, 30)
	require.InDelta(t, 160, p.Usage("u"), 1e-9)

	p.Done(&Request{}, "r0", 30) // no user: nothing to charge
	require.Zero(t, p.Usage(""))
}

func TestVTCUtilisation(t *testing.T) {
	tests := []struct {
		name     string
		req      *Request
		inFlight []int
		want     string
	}{
		// No user: no fairness term, the least utilised replica wins.
		{"anonymous: least utilised", &Request{InputTokens: 10}, []int{30, 5, 20}, "r1"},
		// Fairness puts a new user on r0 unless r0's utilisation (capped at
		// 1 at 100 in flight) costs more than one position.
		{"fairness outweighs load", &Request{User: "new", InputTokens: 10}, []int{60, 0, 0}, "r0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newTestVTC(t, newFakeClock())
			cs := cands(tt.inFlight...)
			require.Equal(t, tt.want, cs[p.Pick(tt.req, cs)].ID)
		})
	}

	t.Run("saturated first replica ties with the next: rotate", func(t *testing.T) {
		// r0: fairness 0 + utilisation 1 (150 in flight, capped); r1: 1 + 0.
		p := newTestVTC(t, newFakeClock())
		got := pickIDs(p, &Request{User: "new"}, cands(150, 0, 0), 3)
		require.Equal(t, []string{"r0", "r1", "r0"}, got)
	})

	t.Run("between two positions load decides", func(t *testing.T) {
		clock := newFakeClock()
		p := newTestVTC(t, clock)
		cs := cands(0, 0, 0)
		// u reaches 500 tokens; with no other user the bucket is
		// max(1000, (500+500)/2) = 1000, so u sits at position 0.5,
		// equally far from r0 and r1.
		p.Pick(&Request{User: "u", InputTokens: 500}, cs)
		cs = cands(40, 10, 0)
		require.Equal(t, "r1", cs[p.Pick(&Request{User: "u", InputTokens: 1}, cs)].ID)
		r := lastTrace(t, p)
		require.InDelta(t, 0.5+0.1, r.Chosen.Score, 1e-9)
	})
}

func TestVTCAnonymousTiesRotate(t *testing.T) {
	p := newTestVTC(t, newFakeClock())
	require.Equal(t, []string{"r0", "r1", "r2"}, pickIDs(p, &Request{}, cands(0, 0, 0), 3))
}

func TestVTCConfigDefaultsMatchAIBrix(t *testing.T) {
	c := DefaultVTCConfig()
	require.Equal(t, time.Minute, c.Window)
	require.Equal(t, 1.0, c.InputTokenWeight)
	require.Equal(t, 2.0, c.OutputTokenWeight)
	require.Equal(t, 100.0, c.MaxReplicaLoad)
	require.NoError(t, c.ValidateAt("vtc"))
}

// TestVTCBoundsUsersByCount: a client that sends a new user on every request grew the
// per-user table without limit for the whole window. It is now bounded by max_users: beyond
// it the lightest users are forgotten (a forgotten user only looks lighter than it was), the
// heavy ones are kept, and every eviction is reported.
func TestVTCBoundsUsersByCount(t *testing.T) {
	clock := newFakeClock()
	cfg := DefaultVTCConfig()
	cfg.MaxUsers = 100
	p, err := NewVTCBasic(cfg, clock.Now)
	require.NoError(t, err)
	var evicted int
	p.evicted = func(table string, n int) {
		require.Equal(t, TableUsers, table)
		evicted += n
	}
	cs := cands(0, 0, 0)
	p.Pick(&Request{User: "heavy", InputTokens: 50_000}, cs)
	for i := range 10_000 {
		p.Pick(&Request{User: fmt.Sprintf("one-off-%d", i), InputTokens: 10}, cs)
		p.mu.Lock()
		n := len(p.users)
		p.mu.Unlock()
		require.LessOrEqual(t, n, cfg.MaxUsers, "after %d new users", i+1)
	}
	require.InDelta(t, 50_000, p.Usage("heavy"), 1e-9, "the heaviest user's window is kept")
	require.Equal(t, 10_001, evicted+len(p.users), "every user that left was reported")
	require.Positive(t, evicted)

	// The bucket still sees the heavy user: it stays off the first replica.
	require.Equal(t, "r2", cs[p.Pick(&Request{User: "heavy", InputTokens: 1}, cs)].ID)
}

func TestVTCMaxUsersIsValidated(t *testing.T) {
	c := DefaultVTCConfig()
	c.MaxUsers = 0
	require.ErrorContains(t, c.ValidateAt("vtc"), "vtc.max_users: must be in [1,")
}
