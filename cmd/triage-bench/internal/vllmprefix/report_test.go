package vllmprefix

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRowFillAndTable(t *testing.T) {
	results := []result{
		{Session: "s00", Turn: 0, Replica: "vllm-0", TTFT: 40 * time.Millisecond, Outcome: Outcome{Predicted: 0, HasPrediction: true, Cached: 0, Prompt: 200}},
		{Session: "s00", Turn: 1, Replica: "vllm-0", TTFT: 50 * time.Millisecond, Outcome: Outcome{Predicted: 192, HasPrediction: true, Cached: 192, Prompt: 260}},
		{Session: "s01", Turn: 0, Replica: "vllm-1", TTFT: 60 * time.Millisecond, Outcome: Outcome{Predicted: 160, HasPrediction: true, Cached: 0, Prompt: 200}},
		{Session: "s02", Turn: 0, Replica: "vllm-1", TTFT: 70 * time.Millisecond, Outcome: Outcome{Predicted: 0, Pending: 160, HasPrediction: true, Cached: 0, Prompt: 200}},
		{Session: "s01", Turn: 1, Replica: "vllm-1", Err: "status 502: upstream"},
	}
	before := []cacheCounters{{Queries: 1000, Hits: 100}, {Queries: 0, Hits: 0}}
	after := []cacheCounters{{Queries: 1460, Hits: 292}, {Queries: 200, Hits: 0}}
	row := Row{Key: "prefix-cache+events", Policy: "prefix-cache", Events: true}
	row.fill(results, before, after, 32)

	require.Equal(t, 5, row.Requests)
	require.Equal(t, 4, row.OK)
	require.Equal(t, "s01 turn 1: status 502: upstream", row.FirstError)
	require.Equal(t, map[string]int{"vllm-0": 2, "vllm-1": 3}, row.PerReplica)
	require.Equal(t, 660.0, row.EngineQueries)
	require.Equal(t, 192.0, row.EngineHits)
	require.InDelta(t, 192.0/660, row.EngineHitRatio, 1e-9)
	require.Equal(t, 860, row.UsagePrompt)
	require.Equal(t, 192, row.UsageCached)
	require.Equal(t, 4, row.TTFT.N)
	require.Equal(t, Agreement{Requests: 4, Predicted: 4, HitAgrees: 2, WithinBlock: 2, Agrees: 2, Exact: 2, Over: 2}, row.Agreement,
		"what the policy routed on: the pending tokens count")
	require.Equal(t, Agreement{Requests: 4, Predicted: 4, HitAgrees: 3, WithinBlock: 3, Agrees: 3, Exact: 3, Over: 1}, row.AgreementStored)
	require.Equal(t, []string{"s01 turn 0 on vllm-1: predicted 160 (+0 pending), cached 0 of 200 prompt tokens",
		"s02 turn 0 on vllm-1: predicted 0 (+160 pending), cached 0 of 200 prompt tokens"}, row.Disagreements)

	guess := Row{Key: "round-robin", Policy: "round-robin"}
	guess.fill(results[:1], before, before, 32)
	rep := &Report{Rows: []Row{row, guess}}
	table := rep.Table()
	lines := strings.Split(strings.TrimSpace(table), "\n")
	require.Len(t, lines, 4)
	require.Contains(t, lines[2], "| prefix-cache | yes | 4 / 5 | 29.1% |")
	require.Contains(t, lines[2], "| 50.0% | 50.0% | 50.0% | 50.0% | 75.0% | vllm-0 2, vllm-1 3 |")
	require.Contains(t, lines[3], "| round-robin | no | 1 / 1 | 0.0% |")
	require.Contains(t, lines[3], "| n/a | n/a | n/a | n/a | n/a |")
	md := rep.Markdown()
	require.Contains(t, md, "prefix-cache+events: 1 of 5 requests failed, first: s01 turn 1")
	require.Contains(t, md, "- s01 turn 0 on vllm-1: predicted 160 (+0 pending), cached 0")
}

func TestGatewayYAMLRoutesOnEventsOnlyWhenAsked(t *testing.T) {
	c := &config{PendingTTL: 2 * time.Second, TokenizeTimeout: time.Second}
	c.Engine.BlockSize = 32
	es := []*engine{{name: "vllm-0", url: "http://127.0.0.1:1", events: "tcp://127.0.0.1:2"}, {name: "vllm-1", url: "http://127.0.0.1:3", events: "tcp://127.0.0.1:4"}}
	on := gatewayYAML(c, Variant{Key: "lmetric-sticky+events", Policy: "lmetric", LMetric: "sticky", Events: true}, es)
	require.Contains(t, on, `kv_events: {endpoint: "tcp://127.0.0.1:4", topic: kv-events, mode: bind}`)
	require.Contains(t, on, "policy: {name: lmetric, lmetric: {variant: sticky}}")
	require.Contains(t, on, "kv_events: {pending_ttl: 2s, tokenize_timeout: 1s, block_size: 32}")
	off := gatewayYAML(c, Variant{Key: "round-robin", Policy: "round-robin"}, es)
	require.NotContains(t, off, "kv_events")
	require.Contains(t, off, "policy: {name: round-robin}\n")
}

func TestFlagsNameWhatIsWrong(t *testing.T) {
	var stderr strings.Builder
	_, err := parseFlags([]string{"--policies", "round-robin,bogus", "--block-size", "16", "--sessions", "0"}, &stderr)
	require.ErrorContains(t, err, `--policies: unknown run "bogus"`)
	require.ErrorContains(t, err, "--block-size: must be a positive multiple of 32")
	require.ErrorContains(t, err, "--sessions: must be in [1, 256], got 0")
	c, err := parseFlags(nil, &stderr)
	require.NoError(t, err)
	require.Len(t, c.Policies, len(Variants))
}
