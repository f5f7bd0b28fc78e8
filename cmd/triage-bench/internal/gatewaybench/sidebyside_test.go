package gatewaybench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/bench/report"
)

// ramp is n latencies in ms: base, base+step, ...
func ramp(n int, base, step float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = base + step*float64(i)
	}
	return out
}

func TestAddedMsSubtractsPercentiles(t *testing.T) {
	direct := ramp(100, 20, 0.01) // p50 = 20.49, p99 = 20.98 (nearest rank)
	path := ramp(100, 20.5, 0.01) // every request 0.5 ms slower
	path[99] = 60                 // and the slowest one much slower: p99 is the 99th value still
	p50, p99 := addedMs(path, direct)
	require.InDelta(t, 0.5, p50, 1e-9)
	require.InDelta(t, 0.5, p99, 1e-9)
	path[98] = 59 // now the 99th value is slow too
	_, p99 = addedMs(path, direct)
	require.InDelta(t, 59-20.98, p99, 1e-9)
	require.Equal(t, 20.0, direct[0], "the caller's samples are not sorted or changed")
	p50, _ = addedMs(nil, direct)
	require.True(t, math.IsNaN(p50), "no sample: not measured")
}

// sideFixture is two repeats of one client, non-streamed: direct at 25 ms, the Go proxy
// 0.4 / 0.6 ms above it, misses 12 / 14 ms above, with CPU, stages and reasons.
func sideFixture() []sideCell {
	var cells []sideCell
	for rep, shift := range []float64{0, 1} { // repeat 2's replica is 1 ms slower
		k := sideKey{Repeat: rep + 1, Clients: 1}
		cells = append(cells,
			sideCell{Path: pathDirect, sideKey: k, OK: 100, lat: ramp(100, 25+shift, 0)},
			sideCell{Path: pathGoProxy, sideKey: k, OK: 100, CPUSec: 0.02, lat: ramp(100, 25.4+0.2*float64(rep)+shift, 0)},
			sideCell{Path: pathMiss, sideKey: k, OK: 99, Failed: 1, CPUSec: 0.5, lat: ramp(99, 37+2*float64(rep)+shift, 0),
				Stages: map[string]int{"static": 10 + 10*rep, "encoder": 80 - 10*rep}, Reasons: map[string]int{"fast_model": 90, "classifier_timeout": 9},
				Timing: map[string]float64{"inference": 990}, Encoded: 85},
		)
	}
	return cells
}

func TestSideRowsFoldRepeats(t *testing.T) {
	rows := sideRows(sideFixture())
	require.Len(t, rows, 3)
	require.Equal(t, []string{pathDirect, pathGoProxy, pathMiss}, []string{rows[0].Path, rows[1].Path, rows[2].Path})

	proxy := rows[1]
	require.InDeltaSlice(t, []float64{0.4, 0.6}, proxy.RepeatAddedP50, 1e-9, "each repeat against its own direct cell")
	require.InDelta(t, 0.4, proxy.AddedP50, 1e-9, "pooled: p50 of 100 × 25.4 and 100 × 26.6 (the 100th value) minus that of 100 × 25 and 100 × 26")
	require.InDelta(t, 0.2, proxy.cpuPer1k(), 1e-9, "0.04 CPU s over 200 requests")
	require.True(t, math.IsNaN(proxy.staticShare()))

	miss := rows[2]
	require.InDeltaSlice(t, []float64{12, 14}, miss.RepeatAddedP50, 1e-9)
	require.Equal(t, 200, miss.Requests)
	require.Equal(t, 2, miss.Failed)
	require.InDelta(t, 5.0, miss.cpuPer1k(), 1e-9)
	require.InDelta(t, 30.0/180, miss.staticShare(), 1e-9)
	require.InDelta(t, 18.0/198, miss.fallbackShare(), 1e-9)
	require.InDelta(t, 10.0, miss.TimingMean["inference"], 1e-9, "1980 ms over 198 answers")
	require.True(t, math.IsNaN(rows[0].cpuPer1k()), "the replica's CPU is not measured")
}

func TestSideGoalsVerdicts(t *testing.T) {
	row := func(path string, n int, stream bool, p50, p99, cpu float64) sideRow {
		return sideRow{Path: path, Clients: n, Stream: stream, AddedP50: p50, AddedP99: p99, CPUSec: cpu, Requests: 1000,
			Stages: map[string]int{"static": 3, "encoder": 1}, Reasons: map[string]int{"fast_model": 3, "classifier_busy": 1}}
	}
	rows := []sideRow{
		row(pathGoProxy, 1, false, 0.4, 1, 0.2), row(pathGoProxy, 1, true, 0.3, 1, 0.2),
		row(pathGoProxy, 16, false, 0.5, 2, 0.2), row(pathGoProxy, 16, true, 0.3, 2, 0.2),
		row(pathMiss, 1, false, 0.9, 5, 1), row(pathMiss, 1, true, 1.0, 5, 1),
		row(pathMiss, 16, false, 2, 9, 1.4), row(pathMiss, 16, true, 2, 54, 1.4),
	}
	g := sideGoals(rows, []int{16, 1})
	require.Len(t, g, 5)
	require.Equal(t, "cache miss, added p50 at 1 client(s), non-stream / stream TTFT", g[0].Name)
	require.Equal(t, "0.90 ms / 1.00 ms", g[0].Value)
	require.Equal(t, "≤ 1 ms: PASS (Go proxy 0.40 ms / 0.30 ms)", g[0].Target)
	require.Equal(t, "≤ 10 ms: MISS (Go proxy 2.00 ms / 2.00 ms)", g[1].Target, "one mode over the goal misses it")
	require.Equal(t, "1.40", g[2].Value)
	require.Equal(t, "≤ 1.5: PASS (Go proxy 0.20, cache hit —)", g[2].Target, "a path not run is —, not zero")
	require.Equal(t, "75.0% / 75.0%", g[3].Value)
	require.Equal(t, "25.0% / 25.0%", g[4].Value)

	// A goal whose cell was not measured at all is missed, not passed.
	g = sideGoals(rows[:4], []int{1, 16})
	require.Contains(t, g[0].Target, "MISS")
	require.Equal(t, "n/a / n/a", g[0].Value)
}

func TestMsRange(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want string
	}{
		{[]float64{0.45, 0.41, 0.52}, "0.41–0.52 ms"},
		{[]float64{9.5, 11}, "9.50–11 ms"},
		{[]float64{12.3, 12.4}, "12 ms"},
		{[]float64{-0.05, 0.1}, "-0.05–0.10 ms"},
		{[]float64{math.NaN(), 2}, "2.00 ms"},
		{nil, "n/a"},
	} {
		require.Equal(t, tc.want, msRange(tc.in), "%v", tc.in)
	}
}

func TestParseServerTiming(t *testing.T) {
	h := `cache;desc="miss";dur=0.012, static;dur=0.300, queue;dur=1.5, inference;dur=9.250, decision;dur=0.004, stage;desc="encoder"`
	require.Equal(t, map[string]float64{"cache": 0.012, "static": 0.3, "queue": 1.5, "inference": 9.25, "decision": 0.004}, parseServerTiming(h))
	require.Empty(t, parseServerTiming(""))
	require.Empty(t, parseServerTiming("x;dur=abc"))
}

func TestSideDetailIssueTable(t *testing.T) {
	cells := sideFixture()
	run := sideRun{Cells: cells, LoadAvg: []string{"1.00 0.50 0.25", "1.10 0.60 0.30"}, Replica: "in-process sim: test"}
	cfg := &gatewayConfig{Bin: "bin/triage", SideClients: []int{1}, SideRepeats: 2, SideRequests: []int{100}, Seed: 1}
	md := sideDetail(run, sideRows(cells), cfg, "side.yaml")
	for _, want := range []string{
		"| added to the replica's own latency, p50 (range over repeats) | 1 client(s), non-stream | 1 client(s), stream TTFT | CPU s per 1k requests (c1) |\n|---|---|---|---|\n",
		"| replica alone (its own latency, not added) | 25 ms | n/a | — |\n",
		"| Go httputil.ReverseProxy | 0.40–0.60 ms | n/a | 0.20 |\n",
		"| **Triage, cache miss** | 12–14 ms | n/a | 5.00 |\n",
		"| triage-miss | 1 | non-stream | 200 | 2 | 37 ms |",
		"| 16.7% | 9.1% |",
		"Load average (1, 5, 15 min) at the start and after each repeat: 1.00 0.50 0.25; 1.10 0.60 0.30.",
		"| triage-miss | 1 | non-stream | 0.000 | 0.000 | 0.000 | 10.000 | 0.000 | 170 / 150 | classifier_timeout: 18, fast_model: 180 |",
	} {
		require.Contains(t, md, want)
	}
	// The report as a whole still renders the summary first.
	var b strings.Builder
	report.WriteScenarios(&b, []report.Scenario{{Name: "side-by-side", Summary: sideGoals(sideRows(cells), []int{1}), Detail: md}})
	require.Contains(t, b.String(), "| side-by-side | cache miss, added p50 at 1 client(s), non-stream / stream TTFT | 12 ms / n/a | ≤ 1 ms: MISS")
}

// TestRevProxyForwardsAndStreams runs the plain proxy in front of a real server: a POST's
// body and path reach the target, and SSE events come through one by one, each before the
// target writes the next.
func TestRevProxyForwardsAndStreams(t *testing.T) {
	next := make(chan struct{})
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/stream" {
			w.Header().Set("Content-Type", "text/event-stream")
			for i := range 2 {
				fmt.Fprintf(w, "data: %d\n\n", i)
				w.(http.Flusher).Flush()
				<-next
			}
			return
		}
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s %s", r.Method, r.URL.Path, b)
	}))
	defer target.Close()
	u, err := url.Parse(target.URL)
	require.NoError(t, err)
	proxy := httptest.NewServer(newRevProxy(u))
	defer proxy.Close()

	resp, err := http.Post(proxy.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"a":1}`))
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, `POST /v1/chat/completions {"a":1}`, string(b))

	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, proxy.URL+"/stream", nil)
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	for i := range 2 {
		line, err := rd.ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, fmt.Sprintf("data: %d\n", i), line, "event %d arrives while the target still holds the stream", i)
		rd.ReadString('\n')
		next <- struct{}{}
	}
}

// TestReportHeaderNamesWhoStartedTheGateway: a run of only the scenarios that start their
// own gateways does not claim one gateway with the default config was ready after 0 s.
func TestReportHeaderNamesWhoStartedTheGateway(t *testing.T) {
	r := &GatewayReport{Command: "triage-bench gateway", Config: &gatewayConfig{Bin: "bin/triage"}}
	require.Contains(t, r.Markdown(), "- Gateway: `bin/triage`, started as a subprocess on 127.0.0.1 by each scenario with its own config (see its section).")
	r.Startup = 2.5
	require.Contains(t, r.Markdown(), "- Gateway: `bin/triage`, config: built-in defaults (simulated pools), started as a subprocess on 127.0.0.1 (ready after 2.5 s).")
}
