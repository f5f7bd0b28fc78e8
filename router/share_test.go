package router

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/decision"
	"github.com/triage-gw/triage/upstream"
)

// TestTokenShareIsObservedAtCompletion: in the tokens unit a routed request enters the
// slow-share window when it completes, with the tokens its answer reported (Used) or, at
// Release without them, weighing the window's mean; once only. Pinned and previewed requests
// stay out.
func TestTokenShareIsObservedAtCompletion(t *testing.T) {
	cfg := testConfig()
	cfg.Decision.ShareUnit = decision.ShareUnitTokens
	r := startRouter(t, cfg, &fakeModel{version: "v1", cutoff: 0.5})
	ctx := context.Background()

	slow, err := r.Route(ctx, "p=0.9 long")
	require.NoError(t, err)
	require.True(t, slow.Slow)
	fast, err := r.Route(ctx, "p=0.1 short")
	require.NoError(t, err)
	_, n := r.SlowShare()
	require.Zero(t, n, "nothing is observed before the answer")

	slow.Used(upstream.Usage{PromptTokens: 10, CompletionTokens: 20})
	slow.Used(upstream.Usage{PromptTokens: 1000}) // the first report wins
	slow.Release()
	fast.Used(upstream.Usage{PromptTokens: 5, CompletionTokens: 5})
	fast.Release()
	fast.Release()
	share, n := r.SlowShare()
	require.Equal(t, 2, n)
	require.InDelta(t, 30.0/40, share, 1e-9)

	// No usage: weighs the mean, 20 tokens.
	unmetered, err := r.Route(ctx, "p=0.1 cut")
	require.NoError(t, err)
	unmetered.Release()
	share, n = r.SlowShare()
	require.Equal(t, 3, n)
	require.InDelta(t, 30.0/60, share, 1e-9)

	pinned, err := r.Pin(true)
	require.NoError(t, err)
	pinned.Used(upstream.Usage{PromptTokens: 100})
	pinned.Release()
	_, err = r.Preview(ctx, "p=0.9 preview")
	require.NoError(t, err)
	_, n = r.SlowShare()
	require.Equal(t, 3, n, "pinned and previewed requests are outside the budget")
}
