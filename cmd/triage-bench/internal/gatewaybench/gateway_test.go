package gatewaybench

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseGatewayFlags(t *testing.T) {
	c, err := parseGatewayFlags(nil, io.Discard)
	require.NoError(t, err)
	require.Equal(t, gatewayScenarios, c.Scenarios)
	require.Equal(t, []int{1, 8}, c.ProxyClients)
	require.Equal(t, 10*time.Second, c.duration("conc-miss"), "0 means the scenario's default")
	require.Equal(t, 20*time.Second, c.duration("query-process"))

	c, err = parseGatewayFlags([]string{"--scenarios", " proxy-cost,,seq-miss", "--proxy-clients", "2", "--duration", "3s"}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, []string{"proxy-cost", "seq-miss"}, c.Scenarios, "order as given, empty items skipped")
	require.Equal(t, []int{2}, c.ProxyClients)
	require.Equal(t, 3*time.Second, c.duration("overload"))

	_, err = parseGatewayFlags([]string{"--scenarios", "x", "--proxy-clients", "0", "--qp-ramp", "1", "--hit-texts", "0"}, io.Discard)
	require.Error(t, err)
	require.Equal(t, []string{
		`gateway: unknown scenario "x" (want seq-miss, conc-miss, conc-hit, overload, query-process, proxy-cost, fail-open, side-by-side)`,
		`gateway: --proxy-clients: "0" is not a count >= 1`,
		"gateway: --scenarios is empty",
		"gateway: --hit-texts must be >= 1, got 0",
		"gateway: --qp-ramp must be in [0, 1), got 1",
	}, strings.Split(err.Error(), "\n"), "every problem reported, in flag order")

	c, err = parseGatewayFlags([]string{"--scenarios", "fail-open", "--fail-open-budgets", "25ms, 1s", "--fail-open-clients", "8"}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, []string{"fail-open"}, c.Scenarios)
	require.Equal(t, []time.Duration{25 * time.Millisecond, time.Second}, c.FailOpenBudgets)
	require.Equal(t, 8, c.FailOpenClients)
	require.Equal(t, 190, c.FailOpenWords, "about 256 word pieces")
	_, err = parseGatewayFlags([]string{"--fail-open-budgets", "50", "--fail-open-words", "0"}, io.Discard)
	require.Equal(t, []string{
		`gateway: --fail-open-budgets: "50" is not a duration > 0`,
		"gateway: --fail-open-words must be >= 1, got 0",
	}, strings.Split(err.Error(), "\n"))

	c, err = parseGatewayFlags([]string{"--scenarios", "side-by-side"}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, []int{1, 16}, c.SideClients)
	require.Equal(t, 3, c.SideRepeats)
	require.Equal(t, []int{200, 800}, c.SideRequests)
	_, err = parseGatewayFlags([]string{"--side-clients", "1,x", "--side-repeats", "0", "--side-requests", "-1"}, io.Discard)
	require.Equal(t, []string{
		`gateway: --side-clients: "x" is not a count >= 1`,
		`gateway: --side-requests: "-1" is not a count >= 1`,
		"gateway: --side-repeats must be >= 1, got 0",
	}, strings.Split(err.Error(), "\n"))
	_, err = parseGatewayFlags([]string{"--side-clients", "1,4,16", "--side-requests", "100,200"}, io.Discard)
	require.ErrorContains(t, err, "gateway: --side-requests has 2 counts, want one for each of the 3 --side-clients")
	_, err = parseGatewayFlags([]string{"--side-clients", ","}, io.Discard)
	require.ErrorContains(t, err, "gateway: --side-clients is empty")

	_, err = parseGatewayFlags([]string{"extra"}, io.Discard)
	require.ErrorContains(t, err, "unexpected arguments")
}
