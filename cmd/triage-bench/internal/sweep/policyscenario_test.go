package sweep

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/bench/sse"
	"github.com/triage-gw/triage/bench/stats"
	"github.com/triage-gw/triage/bench/trace"
	"github.com/triage-gw/triage/sim"
)

func TestReplicaConfigs(t *testing.T) {
	c, err := parsePoliciesFlags(nil, io.Discard)
	require.NoError(t, err)
	require.Equal(t, scenarioHomogeneous, c.Scenario, "today's sweep stays the default")
	base := c.Sim
	for i, sc := range replicaConfigs(c) {
		require.NoError(t, sc.Validate())
		require.Equal(t, c.Trace.Seed*1000+uint64(i), sc.Seed)
		sc.Name, sc.Seed = base.Name, base.Seed
		require.Equal(t, base, sc, "homogeneous replica %d is the sweep's replica", i)
	}

	c, err = parsePoliciesFlags([]string{"--scenario", "heterogeneous", "--replicas", "3"}, io.Discard)
	require.NoError(t, err)
	rc := replicaConfigs(c)
	require.Len(t, rc, 3)
	for _, sc := range rc {
		require.NoError(t, sc.Validate())
	}
	require.Equal(t, "replica-0", rc[0].Name)
	require.Equal(t, 2*base.PrefillPerToken, rc[0].PrefillPerToken, "a slower GPU prefills slower too")
	require.Equal(t, 2*base.DecodePerToken, rc[0].DecodePerToken)
	require.Equal(t, base.TTFTBase, rc[0].TTFTBase, "the fixed overhead is not per token")
	require.Equal(t, base.KVCacheBlocks, rc[0].KVCacheBlocks)
	require.Equal(t, base.KVCacheBlocks/2, rc[1].KVCacheBlocks)
	require.Equal(t, base.PrefillPerToken, rc[1].PrefillPerToken)
	require.Equal(t, base.DecodePerToken, rc[1].DecodePerToken)
	rc[2].Name, rc[2].Seed = base.Name, base.Seed
	require.Equal(t, base, rc[2], "replicas after the first two are unchanged")
}

func TestSLOAttainment(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name  string
		ttfts []time.Duration
		total int
		want  float64
	}{
		{"all within", []time.Duration{10 * ms, 250 * ms}, 2, 1},
		{"the target itself meets it", []time.Duration{250 * ms}, 1, 1},
		{"one over", []time.Duration{10 * ms, 251 * ms}, 2, 0.5},
		{"errors count as misses", []time.Duration{10 * ms}, 4, 0.25},
		{"nothing answered", nil, 3, 0},
		{"nothing sent", nil, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.InDelta(t, tc.want, sloAttainment(tc.ttfts, tc.total, 250*ms), 1e-12)
		})
	}
}

func TestParseScenarioFlags(t *testing.T) {
	c, err := parsePoliciesFlags(nil, io.Discard)
	require.NoError(t, err)
	require.Equal(t, defaultSLOTTFT, c.SLOTTFT)

	c, err = parsePoliciesFlags([]string{"--scenario", "heterogeneous", "--slo-ttft", "400ms"}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, scenarioHeterogeneous, c.Scenario)
	require.Equal(t, 400*time.Millisecond, c.SLOTTFT)

	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--scenario", "mixed"}, []string{`policies: --scenario must be one of homogeneous, heterogeneous, degrading, tenants, disaggregated, got "mixed"`}},
		{[]string{"--scenario", "heterogeneous", "--replicas", "1"}, []string{"policies: --scenario heterogeneous needs --replicas >= 2, got 1"}},
		{[]string{"--slo-ttft", "0s"}, []string{"policies: --slo-ttft must be > 0, got 0s"}},
		{[]string{"--scenario", "degrading", "--replicas", "1"}, []string{"policies: --scenario degrading needs --replicas >= 2, got 1"}},
		{[]string{"--scenario", "degrading", "--duration", "0s", "--requests", "10"}, []string{"policies: --scenario degrading needs --duration > 0 (the slow stretch is a share of it), got 0s"}},
		{[]string{"--scenario", "tenants", "--users", "1"}, []string{"trace users: must be >= 2 with a heavy user (one heavy, the rest light), got 1"}},
		{[]string{"--degrade-from", "1", "--degrade-factor", "0.5"}, []string{
			"policies: --degrade-from must be in [0, 1), got 1",
			"policies: --degrade-factor must be a finite number >= 1, got 0.5",
		}},
		{[]string{"--degrade-from", "0.5", "--degrade-for", "0.6"}, []string{"policies: --degrade-for must be in (0, 1 - --degrade-from] = (0, 0.5], got 0.6"}},
		{[]string{"--heavy-user-share", "1"}, []string{"policies: --heavy-user-share must be in (0, 1), got 1"}},
		{[]string{"--scenario", "", "--slo-ttft", "-1ms"}, []string{
			`policies: --scenario must be one of homogeneous, heterogeneous, degrading, tenants, disaggregated, got ""`,
			"policies: --slo-ttft must be > 0, got -1ms",
		}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, err := parsePoliciesFlags(tc.args, io.Discard)
			require.Error(t, err)
			require.Equal(t, tc.want, strings.Split(err.Error(), "\n"))
		})
	}
}

// TestScenarioReport checks that the report names the scenario, shows the
// SLO column in every format and lists the replicas only where they differ.
func TestScenarioReport(t *testing.T) {
	res := []PolicyResult{{Policy: "least-request", Requests: 4, OK: 4, SLOAttainment: 0.75,
		TTFT: stats.Summary{Mean: 100}, PerReplica: []int{1, 1, 1, 1}}}
	for _, scenario := range scenarios {
		t.Run(scenario, func(t *testing.T) {
			c, err := parsePoliciesFlags([]string{"--scenario", scenario}, io.Discard)
			require.NoError(t, err)
			rep := &PolicyReport{Command: "test", Config: c, SimConfig: c.Sim, Replica: NewReplicaJSON(c.Sim),
				PerReplica: perReplicaJSON(c), Trace: trace.Stats{BlockChars: 64}, Results: res}
			md := rep.Markdown()
			require.Contains(t, md, "("+scenario+" replicas)")
			require.Contains(t, md, "| TTFT ≤ 250ms |")
			require.Contains(t, md, "| 75.0% |")
			require.Contains(t, string(rep.CSV()), ",slo_attainment,")
			require.Contains(t, string(rep.CSV()), ",0.7500,")
			js, err := json.Marshal(rep)
			require.NoError(t, err)
			require.Contains(t, string(js), `"slo_attainment":0.75`)
			require.Contains(t, string(js), `"scenario":"`+scenario+`"`)
			switch scenario {
			case scenarioHomogeneous:
				require.NotContains(t, md, "- Scenario ")
			case scenarioDegrading:
				require.Contains(t, md, "- Scenario degrading: replica 0 runs 2× slower (every prefill and token delay × 2: prefill 300µs and decode 20ms per token) "+
					"from 2.00 s to 6.00 s after the replay's start (25%–75% of the 8s arrival window)")
				require.Contains(t, md, "| slowed: sent to r0 | slowed: TTFT mean ms | slowed: TTFT p99 ms | slowed: TTFT ≤ 250ms |")
			case scenarioTenants:
				require.Contains(t, md, "- Scenario tenants: one heavy user (user-0) holds 50% of the open sessions")
				require.Contains(t, md, "| light TTFT p50 ms | light TTFT p99 ms | light TTFT ≤ 250ms | heavy TTFT p50 ms | heavy TTFT p99 ms | heavy TTFT ≤ 250ms |")
				require.Contains(t, md, "| — | — | — | — | — | — |", "a result without a tenant split")
			}
			if scenario != scenarioTenants {
				require.NotContains(t, md, "light TTFT")
			}
			if scenario != scenarioHeterogeneous {
				require.Nil(t, rep.PerReplica)
				return
			}
			require.Contains(t, md, "replica 0 is a GPU twice as slow per token (prefill 300µs and decode 20ms per token")
			require.Contains(t, md, "replica 1 has half the prefix cache (750 blocks")
			require.Len(t, rep.PerReplica, 4)
			require.Equal(t, "20ms", rep.PerReplica[0].DecodePerToken)
			require.Equal(t, 750, rep.PerReplica[1].KVCacheBlocks)
		})
	}
}

// slowdownRecorder is a fake sleep for degradeSchedule.run: it records how
// long each wait was and how slow the replica was while waiting.
type slowdownRecorder struct {
	srv    *sim.Server
	waits  []time.Duration
	during []float64
	failAt int // the call (from 1) that returns an error as if ctx ended; 0: none
}

func (r *slowdownRecorder) sleep(_ context.Context, d time.Duration) error {
	r.waits = append(r.waits, d)
	r.during = append(r.during, r.srv.Slowdown())
	if len(r.waits) == r.failAt {
		return context.Canceled
	}
	return nil
}

// TestDegradeSchedule checks where the slow stretch falls in the run and
// that a real replica is slowed inside it and at full speed outside it
// (that SetSlowdown doubles the replica's delays is sim's own test).
func TestDegradeSchedule(t *testing.T) {
	c, err := parsePoliciesFlags([]string{"--scenario", "degrading"}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, degradeSchedule{From: 2 * time.Second, Until: 6 * time.Second, Factor: 2}, c.degradeSchedule(), "the middle half of 8 s")
	for _, sc := range replicaConfigs(c) {
		sc.Name, sc.Seed = c.Sim.Name, c.Sim.Seed
		require.Equal(t, c.Sim, sc, "the replicas start alike; only the schedule slows one")
	}

	c, err = parsePoliciesFlags([]string{"--scenario", "degrading", "--duration", "20s", "--degrade-from", "0.1", "--degrade-for", "0.3", "--degrade-factor", "3"}, io.Discard)
	require.NoError(t, err)
	d := c.degradeSchedule()
	require.Equal(t, degradeSchedule{From: 2 * time.Second, Until: 8 * time.Second, Factor: 3}, d)

	srv, err := sim.New(c.Sim, sim.Options{})
	require.NoError(t, err)
	rec := &slowdownRecorder{srv: srv}
	require.NoError(t, d.run(context.Background(), srv, rec.sleep))
	require.Equal(t, []time.Duration{2 * time.Second, 6 * time.Second}, rec.waits)
	require.Equal(t, []float64{1, 3}, rec.during, "full speed before the stretch, slowed inside it")
	require.Equal(t, 1.0, srv.Slowdown(), "full speed again after it")

	rec = &slowdownRecorder{srv: srv, failAt: 2}
	require.NoError(t, d.run(context.Background(), srv, rec.sleep), "a replay cut short is no error")
	require.Len(t, rec.waits, 2)
	require.Equal(t, 3.0, srv.Slowdown(), "nothing runs after the context ended")
}

func TestTenantsScenario(t *testing.T) {
	c, err := parsePoliciesFlags(nil, io.Discard)
	require.NoError(t, err)
	require.Zero(t, c.Trace.HeavyUserShare, "only the tenants scenario has a heavy user")

	c, err = parsePoliciesFlags([]string{"--scenario", "tenants", "--heavy-user-share", "0.4"}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, 0.4, c.Trace.HeavyUserShare)

	ms := time.Millisecond
	reqs := []PreparedRequest{
		{Trace: &trace.Request{User: trace.HeavyUser}}, {Trace: &trace.Request{User: trace.HeavyUser}},
		{Trace: &trace.Request{User: "user-1"}}, {Trace: &trace.Request{User: "user-2"}}, {Trace: &trace.Request{User: "user-3"}},
	}
	out := []RequestResult{
		{OK: true, Timing: sse.Timing{TTFT: 400 * ms}}, {Err: "status 500"},
		{OK: true, Timing: sse.Timing{TTFT: 100 * ms}}, {OK: true, Timing: sse.Timing{TTFT: 200 * ms}}, {OK: true, Timing: sse.Timing{TTFT: 300 * ms}},
	}
	got := tallyTenants(out, reqs, 250*ms)
	require.Equal(t, 2, got.Heavy.Requests)
	require.Equal(t, 1, got.Heavy.OK)
	require.Equal(t, 400.0, got.Heavy.TTFT.P99)
	require.Zero(t, got.Heavy.SLOAttainment, "over the target, and the error is a miss")
	require.Equal(t, 3, got.Light.Requests)
	require.Equal(t, 3, got.Light.OK)
	require.Equal(t, 200.0, got.Light.TTFT.P50)
	require.InDelta(t, 2.0/3, got.Light.SLOAttainment, 1e-12)
}

// Only requests sent inside the slow stretch count, [From, Until); cut ones never do.
func TestTallyDegraded(t *testing.T) {
	d := degradeSchedule{From: 2 * time.Second, Until: 6 * time.Second, Factor: 2}
	ok := func(at time.Duration, replica string, ttft time.Duration) RequestResult {
		return RequestResult{OK: true, Replica: replica, sent: at, wasSent: true, Timing: sse.Timing{TTFT: ttft}}
	}
	out := []RequestResult{
		ok(time.Second, "r0", time.Second),                    // before: ignored
		ok(2*time.Second, "r0", 400*time.Millisecond),         // first instant counts
		ok(3*time.Second, "r1", 100*time.Millisecond),         // in
		{Replica: "r0", sent: 4 * time.Second, wasSent: true}, // in, failed: a miss
		{sent: 5 * time.Second},                               // never sent: ignored
		ok(6*time.Second, "r0", time.Second),                  // Until: after
	}
	got := tallyDegraded(out, d, "r0", 250*time.Millisecond)
	require.Equal(t, 3, got.Requests)
	require.Equal(t, 2, got.ToSlow)
	require.Equal(t, 2, got.TTFT.N)
	require.InDelta(t, 1.0/3, got.SLOAttainment, 1e-9)
	require.Equal(t, " 2 / 3 (67%) | 250 | 400 | 33.3% |", degradeCells(got))
	require.Equal(t, " — | — | — | — |", degradeCells(nil))
}
