package policy

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// sharers builds each Sharer twice (two gateways' copies of one pool's policy), with 4-char
// blocks.
func sharers(t *testing.T) map[string]func() Sharer {
	t.Helper()
	return map[string]func() Sharer{
		"prefix-cache": func() Sharer { return newTestPrefixCache(t, nil) },
		"lmetric":      func() Sharer { return newTestLMetric(t, LMetricPlain) },
		"lmetric-sticky": func() Sharer {
			return newTestLMetric(t, LMetricSticky)
		},
		"lmetric-unified": func() Sharer { return newTestLMetric(t, LMetricUnified) },
		"weighted":        func() Sharer { return newTestWeighted(t, nil) },
	}
}

// A pick on gateway A, shared and observed on gateway B, makes B's next pick of the same
// prompt go to A's replica, which B would not have chosen on its own (it is not the first
// of equally loaded candidates, which the tie-break takes).
func TestObservedPickSteersTheNextPick(t *testing.T) {
	const prompt = "aaaabbbbccccdddd"
	for name, build := range sharers(t) {
		t.Run(name, func(t *testing.T) {
			a, b := build(), build()
			req := &Request{Prompt: prompt, InputTokens: 40, Session: "s1"}
			// A sends the request to r2 (as if it were the least loaded there).
			cs := cands(3, 3, 0, 3)
			require.Equal(t, "r2", cs[a.(Picker).Pick(req, cs)].ID)
			o, ok := a.Share(req, "r2")
			require.True(t, ok)
			require.Equal(t, "r2", o.ReplicaID)
			require.Equal(t, 4, o.BlockChars)
			require.Len(t, o.Hashes, 4)

			// Without the observation B's tie-break takes r0.
			fresh := build()
			even := cands(0, 0, 0, 0)
			require.Equal(t, "r0", even[fresh.(Picker).Pick(&Request{Prompt: prompt, InputTokens: 40}, even)].ID)

			require.True(t, b.Observe(o))
			next := &Request{Prompt: prompt + "eeee", InputTokens: 50, Session: "s1"}
			require.Equal(t, "r2", even[b.(Picker).Pick(next, even)].ID)
		})
	}
}

// Observe charges no load: lmetric's pending prefill stays empty, so nothing waits for a Done.
func TestObserveChargesNoLoad(t *testing.T) {
	a, b := newTestLMetric(t, LMetricSticky), newTestLMetric(t, LMetricSticky)
	req := &Request{Prompt: "aaaabbbb", InputTokens: 80, Session: "s"}
	a.Pick(req, cands(0, 0))
	require.Equal(t, int64(80), a.pending["r0"])
	o, ok := a.Share(req, "r0")
	require.True(t, ok)
	require.True(t, b.Observe(o))
	require.Empty(t, b.pending)
	require.Empty(t, b.inflight)
	b.Done(req, "r0", 3) // a Done for a request b never picked is ignored
	require.Empty(t, b.pending)
}

// lmetric-sticky keeps an observed session on its replica even when that replica is the
// busiest and the prompt is new (the binding, not the index, decides).
func TestObservedSessionIsSticky(t *testing.T) {
	b := newTestLMetric(t, LMetricSticky)
	require.True(t, b.Observe(Observation{ReplicaID: "r1", Session: SessionHash("conv-7")}))
	cs := cands(0, 9, 0)
	require.Equal(t, "r1", cs[b.Pick(&Request{Prompt: "zzzz", InputTokens: 10, Session: "conv-7"}, cs)].ID)
	require.Equal(t, "affinity", lastTrace(t, b).Note)
}

func TestObserveRefusesWhatItCannotUse(t *testing.T) {
	hs, _ := appendBlockHashes(nil, "aaaabbbb", 8)
	other := Observation{ReplicaID: "r1", BlockChars: 8, Hashes: hs}
	for name, build := range sharers(t) {
		t.Run(name, func(t *testing.T) {
			s := build()
			require.False(t, s.Observe(other), "hashes of another block size never match")
			require.False(t, s.Observe(Observation{ReplicaID: "r1", BlockChars: 4}), "nothing to apply")
		})
	}
	// A session without usable hashes is still a binding for the variants that keep sessions.
	require.True(t, newTestLMetric(t, LMetricSticky).Observe(Observation{ReplicaID: "r1", BlockChars: 8, Hashes: hs, Session: 5}))
	require.False(t, newTestLMetric(t, LMetricPlain).Observe(Observation{ReplicaID: "r1", Session: 5}))
	w := newTestWeighted(t, map[string]float64{ScorerQueueDepth: 1})
	_, ok := w.Share(&Request{Prompt: "aaaa"}, "r0")
	require.False(t, ok, "weighted without prefix-affinity keeps no index")
}

func TestShareBoundsAndOmissions(t *testing.T) {
	p := newTestPrefixCache(t, nil)
	_, ok := p.Share(&Request{}, "r0")
	require.False(t, ok, "an empty prompt has nothing to share")

	long := strings.Repeat("x", 4*(MaxShareBlocks+50))
	o, ok := p.Share(&Request{Prompt: long}, "r0")
	require.True(t, ok)
	require.Len(t, o.Hashes, MaxShareBlocks)
	full, _ := appendBlockHashes(nil, long, 4)
	require.Equal(t, full[:MaxShareBlocks], o.Hashes, "the leading blocks, as Pick hashes them")

	lm := newTestLMetric(t, LMetricPlain)
	o, ok = lm.Share(&Request{Prompt: "aaaa", Session: "s"}, "r0")
	require.True(t, ok)
	require.Zero(t, o.Session, "plain lmetric keeps no sessions, so it shares none")
	st := newTestLMetric(t, LMetricSticky)
	o, ok = st.Share(&Request{Session: "s"}, "r0")
	require.True(t, ok, "a session alone is worth sharing")
	require.Equal(t, SessionHash("s"), o.Session)
	require.Empty(t, o.Hashes)
}

func TestSessionHash(t *testing.T) {
	require.Zero(t, SessionHash(""))
	require.NotZero(t, SessionHash("a"))
	require.NotEqual(t, SessionHash("a"), SessionHash("b"))
}

// BenchmarkShare measures what fleet mode adds to a pick on the request path (Share: the
// prompt hashed again into a fresh slice) and what a gateway spends applying another's pick
// (Observe), for a 6,000-character chat prompt.
func BenchmarkShare(b *testing.B) {
	prompt := strings.Repeat("You are the support desk's assistant. Answer in one sentence. ", 100)
	req := &Request{Prompt: prompt, InputTokens: len(prompt) / 4, Session: "conv-1"}
	for _, name := range []string{"prefix-cache", "lmetric", "weighted"} {
		cfg := DefaultConfig()
		cfg.Name = name
		p, err := New(cfg, Env{})
		require.NoError(b, err)
		s := p.(Sharer)
		b.Run(name+"/share", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				s.Share(req, "r1")
			}
		})
		o, _ := s.Share(req, "r1")
		b.Run(name+"/observe", func(b *testing.B) {
			for b.Loop() {
				s.Observe(o)
			}
		})
	}
}
