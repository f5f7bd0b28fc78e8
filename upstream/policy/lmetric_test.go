package policy

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

func newTestLMetric(t *testing.T, variant string) *LMetric {
	t.Helper()
	cfg := DefaultLMetricConfig()
	cfg.BlockChars = 4
	cfg.Variant = variant
	p, err := NewLMetric(cfg)
	require.NoError(t, err)
	p.SetTracer(NewTracer(8, 16, nil))
	return p
}

func traceScores(t *testing.T, p Picker) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, c := range lastTrace(t, p).Top {
		out[c.ID] = c.Score
	}
	return out
}

func TestLMetricScore(t *testing.T) {
	p := newTestLMetric(t, LMetricPlain)
	req1 := &Request{Prompt: "aaaabbbb", InputTokens: 80}
	// All idle: every score is 0 and new prefill is equal, so the rotor
	// decides: r0.
	require.Equal(t, 0, p.Pick(req1, cands(0, 0)))
	require.Equal(t, int64(80), p.pending["r0"])

	// r0 holds 8 of the 12 chars: cache hit 120·8/12 = 80, new prefill 40,
	// score (80 pending + 40)·1 = 120. r1: (0 + 120)·1 = 120. Equal scores;
	// the smaller new prefill (r0's warm cache) wins.
	req2 := &Request{Prompt: "aaaabbbbcccc", InputTokens: 120}
	require.Equal(t, 0, p.Pick(req2, cands(1, 1)))
	require.Equal(t, map[string]float64{"r0": 120, "r1": 120}, traceScores(t, p))
	require.Equal(t, int64(120), p.pending["r0"])

	// req1 ends: only req2's 40 stays pending. r0 now holds all 3 blocks:
	// new prefill 0, score 40·2 = 80 against r1's 120·1.
	p.Done(req1, "r0", 5)
	require.Equal(t, int64(40), p.pending["r0"])
	req3 := &Request{Prompt: "aaaabbbbcccc", InputTokens: 120}
	require.Equal(t, 0, p.Pick(req3, cands(2, 1)))
	require.Equal(t, map[string]float64{"r0": 80, "r1": 120}, traceScores(t, p))

	// Load outweighs cache: r0 (40+0)·5 = 200 > r1 120·1.
	req4 := &Request{Prompt: "aaaabbbbcccc", InputTokens: 120}
	require.Equal(t, 1, p.Pick(req4, cands(5, 1)))
	require.Equal(t, map[string]float64{"r0": 200, "r1": 120}, traceScores(t, p))

	for _, d := range []struct {
		req *Request
		id  string
	}{{req2, "r0"}, {req3, "r0"}, {req4, "r1"}, {req4, "r1"}} { // a repeated Done is ignored
		p.Done(d.req, d.id, 0)
	}
	require.Empty(t, p.pending)
	require.Empty(t, p.inflight)
}

func TestLMetricTieBreaks(t *testing.T) {
	t.Run("equal score and prefill: fewer in flight wins", func(t *testing.T) {
		p := newTestLMetric(t, LMetricPlain)
		// Put 10 pending tokens on r0.
		require.Equal(t, "r0", cands(0, 0)[p.Pick(&Request{Prompt: "zzzz", InputTokens: 10}, cands(0, 0))].ID)
		// r1 first in the list: (0+10)·2 = 20; r0: (10+10)·1 = 20.
		cs := []Candidate{{ID: "r1", InFlight: 2}, {ID: "r0", InFlight: 1}}
		require.Equal(t, "r0", cs[p.Pick(&Request{Prompt: "yyyy", InputTokens: 10}, cs)].ID)
		require.Equal(t, map[string]float64{"r0": 20, "r1": 20}, traceScores(t, p))
	})
	t.Run("full tie: round-robin, not first wins", func(t *testing.T) {
		p := newTestLMetric(t, LMetricPlain)
		cs := cands(0, 0, 0)
		var got []string
		for i := range 3 { // distinct prompts: no cache hits to break the tie
			got = append(got, cs[p.Pick(&Request{Prompt: fmt.Sprint(i, "-prompt"), InputTokens: 50}, cs)].ID)
		}
		require.Equal(t, []string{"r0", "r1", "r2"}, got)
	})
	t.Run("zero in flight: warm cache beats cold", func(t *testing.T) {
		p := newTestLMetric(t, LMetricPlain)
		p.index.record("r2", mustHashes("aaaabbbb", 4))
		cs := cands(0, 0, 0)
		require.Equal(t, "r2", cs[p.Pick(&Request{Prompt: "aaaabbbb", InputTokens: 20}, cs)].ID)
	})
}

func mustHashes(prompt string, blockChars int) []uint64 {
	hs, _ := appendBlockHashes(nil, prompt, blockChars)
	return hs
}

func TestLMetricRetryReplacesCharge(t *testing.T) {
	p := newTestLMetric(t, LMetricPlain)
	req := &Request{Prompt: "abcd", InputTokens: 30}
	p.Pick(req, cands(0, 5)) // r0
	p.Pick(req, cands(5, 0)) // retried on r1
	require.Equal(t, map[string]int64{"r1": 30}, p.pending)
	p.Done(req, "r1", 1)
	require.Empty(t, p.pending)
}

// The pool re-picks a retried request before it discards the failed attempt, whose Done then
// names the first replica: it must leave the new attempt's charge alone.
func TestLMetricDiscardAfterRetryKeepsTheNewCharge(t *testing.T) {
	p := newTestLMetric(t, LMetricPlain)
	req := &Request{Prompt: "abcd", InputTokens: 30}
	p.Pick(req, cands(0, 5)) // r0
	p.Pick(req, cands(5, 0)) // retried on r1
	p.Done(req, "r0", 0)     // the first attempt is discarded
	require.Equal(t, map[string]int64{"r1": 30}, p.pending, "the retry's prefill is still pending on r1")
	p.Done(req, "r1", 1)
	require.Empty(t, p.pending)
}

func TestLMetricSticky(t *testing.T) {
	p := newTestLMetric(t, LMetricSticky)
	req := func(i int) *Request {
		return &Request{Prompt: fmt.Sprint("turn", i), InputTokens: 10, Session: "s1"}
	}
	// First turn goes where lmetric says: the idle r1.
	require.Equal(t, "r1", cands(3, 0, 2)[p.Pick(req(0), cands(3, 0, 2))].ID)
	// Then it stays there however loaded r1 gets.
	for i := 1; i < 4; i++ {
		cs := cands(0, 50*i, 0)
		require.Equal(t, "r1", cs[p.Pick(req(i), cs)].ID)
		require.Equal(t, "affinity", lastTrace(t, p).Note)
	}
	// r1 leaves the candidates: rebind by lmetric.
	cs := []Candidate{{ID: "r0", InFlight: 4}, {ID: "r2", InFlight: 1}}
	require.Equal(t, "r2", cs[p.Pick(req(9), cs)].ID)
	// r1 is back and idle, but the session now belongs to r2.
	cs = cands(0, 0, 9)
	require.Equal(t, "r2", cs[p.Pick(req(10), cs)].ID)

	// Another session, and a request without one, are scored normally.
	cs = cands(3, 0, 3)
	require.Equal(t, "r1", cs[p.Pick(&Request{Prompt: "x", InputTokens: 5, Session: "s2"}, cs)].ID)
	require.Equal(t, "r1", cs[p.Pick(&Request{Prompt: "y", InputTokens: 5}, cs)].ID)
	require.Empty(t, lastTrace(t, p).Note)
}

func TestLMetricUnified(t *testing.T) {
	system := "sys1sys2sys3sys4" // 16 chars, 4 blocks
	first := &Request{Prompt: system, InputTokens: 160, Session: "s"}

	tests := []struct {
		name     string
		prompt   string
		inFlight []int
		want     string
		note     string
	}{
		// Hit 160·16/20 = 160 of 200 → ratio 0.8. r0: (160 pending + 40)·3 =
		// 600, r1: 200·1 = 200, so lmetric alone would leave r0; the
		// affinity gate holds (3 <= 2·avg 2).
		{"warm and not overloaded: stay", system + "more", []int{3, 1}, "r0", "affinity"},
		// avg 11/3 → limit 7.33 < 10: overloaded, fall back to lmetric.
		{"overloaded: leave", system + "more", []int{10, 0, 1}, "r1", ""},
		// At exactly 2× average the gate still holds.
		{"load at the limit: stay", system + "more", []int{4, 0, 2}, "r0", "affinity"},
		// A different prompt has no cache on r0: ratio 0.
		{"cold: leave", "other prompt entirely", []int{1, 0}, "r1", ""},
		// Hit ratio exactly 0.5 (16 of 32 chars) is not above 0.5.
		{"ratio at 0.5: leave", system + "0123456789abcdef", []int{1, 0}, "r1", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newTestLMetric(t, LMetricUnified)
			require.Equal(t, 0, p.Pick(first, cands(0, 0))) // binds s to r0
			cs := cands(tt.inFlight...)
			next := &Request{Prompt: tt.prompt, InputTokens: 10 * len(tt.prompt), Session: "s"}
			require.Equal(t, tt.want, cs[p.Pick(next, cs)].ID)
			require.Equal(t, tt.note, lastTrace(t, p).Note)
			// The session follows the pick.
			id, _ := p.sessions.get(SessionHash("s"))
			require.Equal(t, tt.want, id)
		})
	}
}

func TestLMetricPlainIgnoresSessions(t *testing.T) {
	p := newTestLMetric(t, LMetricPlain)
	require.Nil(t, p.sessions)
	p.Pick(&Request{Prompt: "aaaa", InputTokens: 10, Session: "s"}, cands(0, 1))
	cs := cands(5, 0)
	require.Equal(t, "r1", cs[p.Pick(&Request{Prompt: "bbbb", InputTokens: 10, Session: "s"}, cs)].ID)
}

func TestLMetricSessionsBounded(t *testing.T) {
	cfg := DefaultLMetricConfig()
	cfg.Variant = LMetricSticky
	cfg.MaxSessions = 2
	p, err := NewLMetric(cfg)
	require.NoError(t, err)
	for i := range 10 {
		r := &Request{Prompt: "p", InputTokens: 1, Session: fmt.Sprint("s", i)}
		p.Pick(r, cands(0, 0))
		p.Done(r, "", 0)
	}
	require.Equal(t, 2, p.sessions.len())
}
