package policy

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func newTestPreble(t *testing.T, clock *fakeClock, mutate func(*PrebleConfig)) *Preble {
	t.Helper()
	cfg := DefaultPrebleConfig()
	cfg.BlockChars = 4
	cfg.DecodeWeight = 0 // loads are then the prompt tokens charged, easy to follow
	if mutate != nil {
		mutate(&cfg)
	}
	p, err := NewPreble(cfg, clock.Now)
	require.NoError(t, err)
	p.SetTracer(NewTracer(8, 16, nil))
	return p
}

// req12 is a 12-character prompt of three 4-character blocks, counted as 12 tokens.
func req12(prompt string) *Request { return &Request{Prompt: prompt, InputTokens: 12} }

func TestPrebleExploitsALongMatchOverLoad(t *testing.T) {
	p := newTestPreble(t, newFakeClock(), nil)
	cs := cands(5, 0, 0)
	p.index.record("r0", mustHashes("aaaabbbbcccc", 4))
	// r0 holds all three blocks: matched 12 > missed 0, so it wins although it has the most
	// requests in flight and r1, r2 are idle.
	require.Equal(t, "r0", cs[p.Pick(req12("aaaabbbbcccc"), cs)].ID)
	require.Equal(t, "exploit", lastTrace(t, p).Note)
	// Two of three blocks (8 > 4) is still a majority.
	require.Equal(t, "r0", cs[p.Pick(req12("aaaabbbbdddd"), cs)].ID)
	require.Equal(t, "exploit", lastTrace(t, p).Note)
}

func TestPrebleExploresWhenTheMatchIsAMinority(t *testing.T) {
	p := newTestPreble(t, newFakeClock(), nil)
	cs := cands(0, 0)
	p.charge("r1", 12)
	p.index.record("r0", mustHashes("aaaa", 4))
	// One block of three (4 < 8) is no majority: cost r0 = 0 + 8 missed, r1 = 12 + 12.
	require.Equal(t, "r0", cs[p.Pick(req12("aaaammmmnnnn"), cs)].ID)
	require.Equal(t, "explore", lastTrace(t, p).Note)
	require.Equal(t, []float64{8, 24}, p.scores[:2])
	// Now r0 carries 8 and r1 12; a prompt neither holds costs 20 and 24: r0 again. Load
	// counts, not only the match.
	p.charge("r0", 8)
	require.Equal(t, "r1", cs[p.Pick(req12("ppppqqqqrrrr"), cs)].ID, "r0 28, r1 24")
}

func TestPrebleRebalancesAHotPrefix(t *testing.T) {
	p := newTestPreble(t, newFakeClock(), func(c *PrebleConfig) { c.Balance = 2 })
	cs := cands(0, 0, 0)
	hot := "aaaabbbbcccc"
	p.index.record("r0", mustHashes(hot, 4))
	// Every turn of the hot prefix hits r0 at no prefill cost, so its load never grows:
	// exploit holds.
	for range 5 {
		require.Equal(t, "r0", cs[p.Pick(req12(hot), cs)].ID)
	}
	p.charge("r0", 100)
	// Load 100 > 2 × max(lightest 0, this request's 12): the hot prefix spills to the
	// replica of least cost, which now holds it too.
	got := cs[p.Pick(req12(hot), cs)].ID
	require.NotEqual(t, "r0", got)
	require.Equal(t, "rebalance", lastTrace(t, p).Note)
	require.Equal(t, 3, p.index.leadingMatch(got, mustHashes(hot, 4)))
}

func TestPrebleLoadLeavesTheWindow(t *testing.T) {
	clock := newFakeClock()
	p := newTestPreble(t, clock, func(c *PrebleConfig) { c.Window = 30 * time.Second })
	cs := cands(0, 0)
	p.charge("r0", 24)
	p.charge("r1", 12)
	require.Equal(t, "r1", cs[p.Pick(req12("jjjjkkkkllll"), cs)].ID, "r0 36, r1 24")
	clock.Advance(20 * time.Second)
	p.Pick(req12("mmmmnnnnoooo"), cs)
	require.Equal(t, []float64{36, 36}, p.scores[:2], "20s later all of it still counts")
	clock.Advance(11 * time.Second)
	p.Pick(req12("ssssttttuuuu"), cs)
	require.Equal(t, []float64{24, 12}, p.scores[:2], "31s after the first charges only the 20s-old pick (on r0 by the tie) remains, plus this request's 12")
}

func TestPrebleTiesAndOneReplica(t *testing.T) {
	p := newTestPreble(t, newFakeClock(), nil)
	// Equal cost: the fewest in flight wins.
	cs := cands(3, 1, 2)
	require.Equal(t, "r1", cs[p.Pick(req12("aaaabbbbcccc"), cs)].ID)
	// One replica takes everything, whatever its load.
	one := cands(50)
	for _, s := range []string{"a", "bbbbbbbbbbbbbbbbbbbb", ""} {
		require.Zero(t, p.Pick(&Request{Prompt: s, InputTokens: len(s) / 4}, one))
	}
}

func TestPrebleLearnsTheOutputLength(t *testing.T) {
	p := newTestPreble(t, newFakeClock(), func(c *PrebleConfig) { c.DecodeWeight = 1; c.OutputTokens = 45 })
	for range 200 {
		p.Done(nil, "r0", 5)
	}
	p.Done(nil, "r0", 0) // a request that produced nothing (an error) teaches nothing
	require.InDelta(t, 5, p.meanOut, 0.01)
	cs := cands(0)
	p.Pick(req12("aaaabbbbcccc"), cs)
	require.InDelta(t, 12+5, p.loads["r0"].total, 0.01, "a pick charges its prefill and the expected decode")
}

func TestPrebleObserveSharesThePrefixNotTheLoad(t *testing.T) {
	p := newTestPreble(t, newFakeClock(), nil)
	q := newTestPreble(t, newFakeClock(), nil)
	cs := cands(0, 0)
	o, ok := q.Share(req12("aaaabbbbcccc"), "r1")
	require.True(t, ok)
	require.True(t, p.Observe(o))
	require.Empty(t, p.loads, "another gateway's pick charges no load here")
	require.Equal(t, "r1", cs[p.Pick(req12("aaaabbbbcccc"), cs)].ID)
	require.Equal(t, "exploit", lastTrace(t, p).Note)
	require.False(t, p.Observe(Observation{ReplicaID: "r0", BlockChars: 128, Hashes: o.Hashes}), "another block size")
}

func TestPrebleConfig(t *testing.T) {
	c := DefaultPrebleConfig()
	require.NoError(t, c.ValidateAt("p"))
	c.BlockChars, c.Window, c.DecodeWeight, c.OutputTokens, c.Balance = 0, time.Millisecond, -1, -1, 0.5
	err := c.ValidateAt("pools.fast.policy.preble")
	for _, want := range []string{
		"pools.fast.policy.preble.block_chars: must be >= 1, got 0",
		"pools.fast.policy.preble.window: must be in [1s, 1h], got 1ms",
		"pools.fast.policy.preble.decode_weight: must be a finite number >= 0, got -1",
		"pools.fast.policy.preble.output_tokens: must be in [0, 1048576], got -1",
		"pools.fast.policy.preble.balance: must be a finite number >= 1, got 0.5",
	} {
		require.ErrorContains(t, err, want)
	}
	cfg := DefaultConfig()
	cfg.Name = "prefix-cache-preble"
	pk, err := New(cfg, Env{})
	require.NoError(t, err)
	require.IsType(t, &Preble{}, pk)
}

func TestPrebleConcurrentPicks(t *testing.T) {
	p := newTestPreble(t, newFakeClock(), nil)
	cs := cands(0, 0, 0, 0)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				prompt := strings.Repeat(string(rune('a'+g)), 8) + strings.Repeat("z", i%16)
				j := p.Pick(&Request{Prompt: prompt, InputTokens: len(prompt) / 4}, cs)
				p.Done(nil, cs[j].ID, i%7)
			}
		})
	}
	wg.Wait()
	total := 0.0
	for _, w := range p.loads {
		total += w.total
	}
	require.Positive(t, total)
}

// charge adds v tokens of work to replica id's current slot, as a pick there would.
func (p *Preble) charge(id string, v float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := p.now().UnixNano() / int64(p.slotSpan)
	w := p.loads[id]
	if w == nil {
		w = &workWindow{cur: k}
		p.loads[id] = w
	}
	w.advance(k)
	w.cost[k%prebleSlots] += v
	w.total += v
}
