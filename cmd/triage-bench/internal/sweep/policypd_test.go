package sweep

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/bench/trace"
	"github.com/triage-gw/triage/upstream"
)

func TestParseDisaggregatedFlags(t *testing.T) {
	c, err := parsePoliciesFlags([]string{"--scenario", "disaggregated"}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, pdSweepPolicies, c.Policies, "the scenario's own policies unless --policies names others")
	require.Equal(t, 2, c.prefillReplicas(), "half of the 4 replicas")
	require.Nil(t, c.sweepRoles("least-request"))
	require.Equal(t, []string{upstream.RolePrefill, upstream.RolePrefill, upstream.RoleDecode, upstream.RoleDecode}, c.sweepRoles("pd-random"))

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--policies", "pd-random"}, "the pd-* policies need --scenario disaggregated"},
		{[]string{"--scenario", "disaggregated", "--replicas", "1"}, "--scenario disaggregated needs --replicas >= 2"},
		{[]string{"--scenario", "disaggregated", "--prefill-replicas", "4"}, "--prefill-replicas must be in [0, --replicas (4))"},
		{[]string{"--scenario", "disaggregated", "--policies", "pd-nope"}, `policy "pd-nope"`},
	} {
		_, err := parsePoliciesFlags(tc.args, io.Discard)
		require.ErrorContains(t, err, tc.want, tc.args)
	}
}

// A disaggregated run answers every request from a decode replica, after a
// prefill on a prefill replica, and measures the gaps between tokens.
func TestRunOnePolicyDisaggregated(t *testing.T) {
	if testing.Short() {
		t.Skip("starts servers and replays for about a second")
	}
	c, err := parsePoliciesFlags([]string{"--scenario", "disaggregated", "--duration", "1s", "--rate", "20", "--system-tokens", "200",
		"--ttft-base", "1ms", "--prefill-per-token", "1us", "--decode-per-token", "200us", "--max-tokens", "4",
		"--scrape-interval", "100ms", "--drain", "10s", "--prefill-interference", "0.5"}, io.Discard)
	require.NoError(t, err)
	tr, err := trace.Generate(c.Trace, testRows())
	require.NoError(t, err)
	reqs, err := Prepare(tr, c.Sim.Model, c.MaxTokens)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := runOnePolicy(ctx, c, "pd-least-request", reqs, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	require.Equal(t, len(reqs), res.OK, res.ErrorSample)
	require.Zero(t, res.PerReplica[0]+res.PerReplica[1], "prefill replicas answer no client")
	require.Equal(t, len(reqs), res.PerReplica[2]+res.PerReplica[3])
	require.NotNil(t, res.Decode)
	require.Positive(t, res.Decode.ITL.Mean)
	require.Positive(t, res.Decode.TokensPerSec)
}
