package policy

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
)

// PrebleConfig tunes the prefix-cache-preble policy.
type PrebleConfig struct {
	// BlockChars is the block size in characters (runes). Default 128, as
	// prefix-cache.
	BlockChars int `yaml:"block_chars" json:"block_chars"`
	// IndexBlocks bounds each replica's index of block hashes; the least
	// recently sent blocks are dropped beyond it. Default 200000.
	IndexBlocks int `yaml:"index_blocks" json:"index_blocks"`
	// Window is the paper's H: how long a routed request counts in its
	// replica's load. Default 3m, the paper's and AIBrix's.
	Window time.Duration `yaml:"window" json:"window"`
	// DecodeWeight is the cost of one output token in prompt tokens. The
	// paper fits both from a profile of the model on the GPU, which the
	// gateway does not have; decoding is batched and memory-bound, so a
	// decode token costs the replica a few prefill tokens' time. Default 4.
	DecodeWeight float64 `yaml:"decode_weight" json:"decode_weight"`
	// OutputTokens is the output length a request is expected to produce
	// until finished requests have taught the policy their mean. Default
	// 45, AIBrix's decoding length.
	OutputTokens int `yaml:"output_tokens" json:"output_tokens"`
	// Balance is the paper's Th_bal: the replica holding the longest prefix
	// is used only while its load is at most Balance times the lightest
	// replica's (or this request's own cost, when that is larger). Beyond
	// it the request is placed by cost. Default 2.
	Balance float64 `yaml:"balance" json:"balance"`
}

func init() {
	register("prefix-cache-preble", "preble", DefaultPrebleConfig, func(c PrebleConfig, env Env) (Picker, error) {
		p, err := NewPreble(c, env.Now)
		if err == nil {
			p.index.evicted = evictFunc(env)
		}
		return picker(p, err)
	})
}

// DefaultPrebleConfig returns the paper's window, AIBrix's block size and
// decoding length, a decode weight of 4 and Th_bal 2.
func DefaultPrebleConfig() PrebleConfig {
	return PrebleConfig{BlockChars: 128, IndexBlocks: 200_000, Window: 3 * time.Minute,
		DecodeWeight: 4, OutputTokens: 45, Balance: 2}
}

// ValidateAt reports every invalid field, each named from path
// ("pools.fast.policy.preble" in a pool's config).
func (c PrebleConfig) ValidateAt(path string) error {
	errs := validateBlocks(path, c.BlockChars, c.IndexBlocks)
	if c.Window < time.Second || c.Window > time.Hour {
		errs = append(errs, fmt.Errorf("%s.window: must be in [1s, 1h], got %v", path, c.Window))
	}
	if !validNonNeg(c.DecodeWeight) {
		errs = append(errs, fmt.Errorf("%s.decode_weight: must be a finite number >= 0, got %v", path, c.DecodeWeight))
	}
	if c.OutputTokens < 0 || c.OutputTokens > 1<<20 {
		errs = append(errs, fmt.Errorf("%s.output_tokens: must be in [0, %d], got %d", path, 1<<20, c.OutputTokens))
	}
	if !(c.Balance >= 1) || math.IsInf(c.Balance, 0) {
		errs = append(errs, fmt.Errorf("%s.balance: must be a finite number >= 1, got %v", path, c.Balance))
	}
	return errors.Join(errs...)
}

// Preble is the global scheduler of Preble (Srivatsa et al., "Preble:
// Efficient Distributed Prompt Scheduling for LLM Serving", ICLR 2025), its
// E2 rule, on the gateway's prefix index:
//
//  1. Exploit. When the longest run of the prompt's leading blocks that
//     some replica holds covers more of the prompt than it leaves
//     (matched > missed), the request goes to the replica holding that
//     run; among several, the one with the least load. Load (the paper's
//     L) is the work of the requests routed to the replica within Window:
//     each counts its prompt tokens that replica did not hold plus
//     DecodeWeight × its expected output tokens.
//  2. Balance. The paper moves work off a replica whose load exceeds
//     Th_bal times the lightest one's. Here the exploit target must carry at
//     most Balance × max(lightest load, this request's cost); otherwise the
//     request is placed by cost as in 3, so a hot prefix spills over to
//     other replicas (which then hold it too: the paper's prefix
//     replication, done by routing).
//  3. Explore. Otherwise the request goes to the replica with the lowest
//     cost L + P, P being this request's prefill on it: its prompt tokens
//     beyond that replica's leading match. Ties: fewest in-flight, then
//     round-robin.
//
// What is left out, and why: the paper's third cost term M (the prefill
// time of what the new prompt would evict on the replica, weighted by how
// often it is hit) needs the replica's KV capacity and eviction order. The
// gateway's index is a bounded guess of what each replica was sent, not
// what it holds, so an M computed from it would be noise; it is omitted.
// The paper's times come from a profiled model of prefill and decode on
// the GPU; here cost is counted in prompt tokens, an output token weighing
// DecodeWeight. Its local (per-GPU) scheduler belongs to the model server.
//
// Signals: what each replica holds, from Request.Cache (its engine's
// KV-cache events) where that knows the replica, else from the prefix
// index (as prefix-cache's: what this gateway, and in fleet mode the
// others, sent each replica), and the policy's own window of
// routed work; no scraped signal, so nothing is ever missing or stale.
// Expected output: the mean output length of finished requests (Done),
// exponentially weighted, starting at OutputTokens.
//
// Concurrency: one mutex guards the index and the windows; hashing happens
// outside it.
type Preble struct {
	traced
	cfg PrebleConfig
	now func() time.Time
	rr  rotor

	mu       sync.Mutex
	index    *prefixIndex
	loads    map[string]*workWindow // replica ID → its window; one per replica ever picked
	meanOut  float64                // expected output tokens
	match    []float64              // scratch: matched share of the prompt per candidate
	load     []float64              // scratch: windowed load per candidate
	scores   []float64
	slotSpan time.Duration
}

var (
	_ Picker   = (*Preble)(nil)
	_ Finisher = (*Preble)(nil)
	_ Sharer   = (*Preble)(nil)
)

// prebleSlots divides the window: a request stops counting between
// Window·(1 − 1/prebleSlots) and Window after it was routed.
const prebleSlots = 30

// workWindow is one replica's routed work, in slots of Window/prebleSlots.
type workWindow struct {
	cost  [prebleSlots]float64
	cur   int64 // index of the newest slot: now / slotSpan
	total float64
}

// advance drops the slots the clock has moved past.
func (w *workWindow) advance(k int64) {
	if k <= w.cur {
		return
	}
	for j := w.cur + 1; j <= k && j <= w.cur+prebleSlots; j++ {
		s := &w.cost[j%prebleSlots]
		w.total -= *s
		*s = 0
	}
	if w.total < 1e-9 { // float drift once the window is empty
		w.total = 0
	}
	w.cur = k
}

// NewPreble validates cfg and returns a prefix-cache-preble picker. now
// tells time; nil means time.Now.
func NewPreble(cfg PrebleConfig, now func() time.Time) (*Preble, error) {
	if err := cfg.ValidateAt("preble"); err != nil {
		return nil, err
	}
	if now == nil {
		now = time.Now
	}
	return &Preble{cfg: cfg, now: now, index: newPrefixIndex(cfg.IndexBlocks), loads: map[string]*workWindow{},
		meanOut: float64(cfg.OutputTokens), slotSpan: cfg.Window / prebleSlots}, nil
}

// Pick implements Picker.
func (p *Preble) Pick(req *Request, cands []Candidate) int {
	buf, runes := blockHashesPooled(req.Prompt, p.cfg.BlockChars)
	defer releaseHashes(buf)
	hashes := *buf
	tokens := float64(max(req.InputTokens, 1))

	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(cands)
	p.match, p.load = growFloats(p.match, n), growFloats(p.load, n)
	match, load := p.match, p.load
	k := p.now().UnixNano() / int64(p.slotSpan)
	best, lightest := 0.0, math.Inf(1)
	for i, c := range cands {
		var ok bool
		if match[i], ok = viewShare(req, c.ID); !ok {
			match[i] = 0
			if runes > 0 {
				match[i] = float64(matchedChars(p.index.leadingMatch(c.ID, hashes), p.cfg.BlockChars, runes)) / float64(runes)
			}
		}
		best = max(best, match[i])
		load[i] = 0
		if w := p.loads[c.ID]; w != nil {
			w.advance(k)
			load[i] = w.total
		}
		lightest = min(lightest, load[i])
	}
	// missed is the prompt tokens replica i would prefill: the share of the
	// prompt past its leading match, in the request's tokens.
	missed := func(i int) float64 { return tokens * (1 - match[i]) }
	decode := p.cfg.DecodeWeight * p.meanOut

	chosen, note := -1, "explore"
	if best > 0.5 {
		chosen = p.lightest(cands, load, func(i int) bool { return match[i] == best })
		note = "exploit"
		if load[chosen] > p.cfg.Balance*max(lightest, tokens+decode) {
			chosen, note = -1, "rebalance"
		}
	}
	cost := growFloats(p.scores, n)
	p.scores = cost
	for i := range cands {
		cost[i] = load[i] + missed(i)
	}
	if chosen < 0 {
		chosen = p.lightest(cands, cost, func(int) bool { return true })
	}

	p.index.record(cands[chosen].ID, hashes)
	w := p.loads[cands[chosen].ID]
	if w == nil {
		w = &workWindow{cur: k}
		p.loads[cands[chosen].ID] = w
	}
	charge := missed(chosen) + decode
	w.cost[k%prebleSlots] += charge
	w.total += charge
	if t := p.tracer; t != nil {
		t.Record(cands, cost, chosen, true, note)
	}
	return chosen
}

// lightest returns the eligible candidate with the lowest v, ties going to
// the fewest in-flight and then in turn.
func (p *Preble) lightest(cands []Candidate, v []float64, eligible func(int) bool) int {
	bestV, bestF, count := math.Inf(1), 0, 0
	for i, c := range cands {
		if !eligible(i) {
			continue
		}
		switch {
		case count == 0 || v[i] < bestV || (v[i] == bestV && c.InFlight < bestF):
			bestV, bestF, count = v[i], c.InFlight, 1
		case v[i] == bestV && c.InFlight == bestF:
			count++
		}
	}
	return nthTied(len(cands), p.rr.turn(count), func(i int) bool {
		return eligible(i) && v[i] == bestV && cands[i].InFlight == bestF
	})
}

// Done implements Finisher: the output length of a finished request moves
// the expected output length (weight 1/16).
func (p *Preble) Done(_ *Request, _ string, outputTokens int) {
	if outputTokens <= 0 {
		return
	}
	p.mu.Lock()
	p.meanOut += (float64(outputTokens) - p.meanOut) / 16
	p.mu.Unlock()
}

// Share implements Sharer: the prompt's block hashes, which Pick recorded for the replica.
func (p *Preble) Share(req *Request, replicaID string) (Observation, bool) {
	return shareBlocks(req, replicaID, p.cfg.BlockChars)
}

// Observe implements Sharer: records o's hashes as sent to its replica, as Pick does, and
// charges no load (the Sharer contract: another gateway's work is its own window's).
func (p *Preble) Observe(o Observation) bool {
	return observeBlocks(&p.mu, p.index, p.cfg.BlockChars, o)
}
