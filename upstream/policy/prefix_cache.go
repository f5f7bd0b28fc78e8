package policy

import (
	"errors"
	"fmt"
	"math"
	"sync"
)

// PrefixCacheConfig tunes the prefix-cache policy (from AIBrix's routing
// algorithms).
type PrefixCacheConfig struct {
	// BlockChars is the block size in characters (runes). Default 128,
	// AIBrix's recommendation for its character tokenizer.
	BlockChars int `yaml:"block_chars" json:"block_chars"`
	// IndexBlocks bounds each replica's index of block hashes; the least
	// recently sent blocks are dropped beyond it. Default 200000.
	IndexBlocks int `yaml:"index_blocks" json:"index_blocks"`
	// ImbalanceCount: when max−min InFlight across candidates exceeds it,
	// prefixes are ignored and the least-loaded candidate wins. Default 16.
	ImbalanceCount int `yaml:"imbalance_count" json:"imbalance_count"`
	// LoadFactor: a prefix-matching candidate qualifies only while its
	// InFlight <= mean + LoadFactor·stddev of the candidates' InFlight.
	// Default 2.
	LoadFactor float64 `yaml:"load_factor" json:"load_factor"`
}

func init() {
	register("prefix-cache", "prefix_cache", DefaultPrefixCacheConfig, func(c PrefixCacheConfig, env Env) (Picker, error) {
		p, err := NewPrefixCache(c)
		if err == nil {
			p.index.evicted = evictFunc(env)
		}
		return picker(p, err)
	})
}

// DefaultPrefixCacheConfig returns AIBrix's defaults.
func DefaultPrefixCacheConfig() PrefixCacheConfig {
	return PrefixCacheConfig{BlockChars: 128, IndexBlocks: 200_000, ImbalanceCount: 16, LoadFactor: 2}
}

// ValidateAt reports every invalid field, each named from path
// ("pools.fast.policy.prefix_cache" in a pool's config).
func (c PrefixCacheConfig) ValidateAt(path string) error {
	errs := validateBlocks(path, c.BlockChars, c.IndexBlocks)
	if c.ImbalanceCount < 1 {
		errs = append(errs, fmt.Errorf("%s.imbalance_count: must be >= 1, got %d", path, c.ImbalanceCount))
	}
	if !validNonNeg(c.LoadFactor) {
		errs = append(errs, fmt.Errorf("%s.load_factor: must be a finite number >= 0, got %v", path, c.LoadFactor))
	}
	return errors.Join(errs...)
}

// PrefixCache is AIBrix's prefix-cache-aware policy:
//
//  1. If max−min InFlight across candidates > ImbalanceCount, pick the
//     least-loaded candidate and ignore prefixes.
//  2. Otherwise, among candidates holding a leading run of the request's
//     blocks, order by match share (desc) then InFlight (asc)
//     and take the first with InFlight <= mean + LoadFactor·stddev.
//  3. If no candidate matched or none passed the load filter, pick the
//     least-loaded candidate.
//
// A candidate's match share comes from Request.Cache when that knows the
// replica (its engine's KV-cache events), else from the policy's index of
// what was sent. Then the request's block hashes are recorded as sent to
// the chosen replica. Ties at every step go round-robin. Traces score each candidate
// by its match share in [0,1] (higher is better), so regret is the share
// of prefix given up to balance load.
//
// Concurrency: one mutex guards the index; hashing happens outside it.
type PrefixCache struct {
	traced
	cfg PrefixCacheConfig
	rr  rotor

	mu    sync.Mutex
	index *prefixIndex
	match []float64 // scratch: matched share of the prompt per candidate
}

var (
	_ Picker = (*PrefixCache)(nil)
	_ Sharer = (*PrefixCache)(nil)
)

// NewPrefixCache validates cfg and returns a prefix-cache picker.
func NewPrefixCache(cfg PrefixCacheConfig) (*PrefixCache, error) {
	if err := cfg.ValidateAt("prefix_cache"); err != nil {
		return nil, err
	}
	return &PrefixCache{cfg: cfg, index: newPrefixIndex(cfg.IndexBlocks)}, nil
}

// Pick implements Picker.
func (p *PrefixCache) Pick(req *Request, cands []Candidate) int {
	buf, _ := blockHashesPooled(req.Prompt, p.cfg.BlockChars)
	defer releaseHashes(buf)
	hashes := *buf

	p.mu.Lock()
	defer p.mu.Unlock()

	n := len(cands)
	p.match = growFloats(p.match, n)
	match := p.match
	lo, hi, sum := cands[0].InFlight, cands[0].InFlight, 0
	anyMatch := false
	for i, c := range cands {
		lo, hi, sum = min(lo, c.InFlight), max(hi, c.InFlight), sum+c.InFlight
		var ok bool
		if match[i], ok = viewShare(req, c.ID); !ok {
			match[i] = 0
			if len(hashes) > 0 {
				match[i] = float64(p.index.leadingMatch(c.ID, hashes)) / float64(len(hashes))
			}
		}
		anyMatch = anyMatch || match[i] > 0
	}

	chosen, note := -1, ""
	switch {
	case hi-lo > p.cfg.ImbalanceCount:
		note = "imbalance"
	case !anyMatch:
		note = "no-match"
	default:
		mean := float64(sum) / float64(n)
		var ss float64
		for _, c := range cands {
			d := float64(c.InFlight) - mean
			ss += d * d
		}
		limit := mean + p.cfg.LoadFactor*math.Sqrt(ss/float64(n))
		chosen = p.bestMatch(cands, match, limit)
		note = "prefix-match"
		if chosen < 0 {
			note = "match-overloaded"
		}
	}
	if chosen < 0 {
		chosen = leastInFlight(cands, &p.rr)
	}

	p.index.record(cands[chosen].ID, hashes)
	if t := p.tracer; t != nil {
		t.Record(cands, match, chosen, false, note)
	}
	return chosen
}

// bestMatch returns the first candidate in (match desc, InFlight asc)
// order among those that matched and whose InFlight <= limit, taking ties
// in turn; -1 when none qualifies. Equivalent to AIBrix's sort-then-scan
// without sorting.
func (p *PrefixCache) bestMatch(cands []Candidate, match []float64, limit float64) int {
	bestM, bestL, count := 0.0, 0, 0
	for i, c := range cands {
		if match[i] == 0 || float64(c.InFlight) > limit {
			continue
		}
		switch {
		case count == 0 || match[i] > bestM || (match[i] == bestM && c.InFlight < bestL):
			bestM, bestL, count = match[i], c.InFlight, 1
		case match[i] == bestM && c.InFlight == bestL:
			count++
		}
	}
	if count == 0 {
		return -1
	}
	return nthTied(len(cands), p.rr.turn(count), func(i int) bool {
		return match[i] == bestM && cands[i].InFlight == bestL && float64(cands[i].InFlight) <= limit
	})
}

// Share implements Sharer: the prompt's block hashes, which Pick recorded for the replica.
func (p *PrefixCache) Share(req *Request, replicaID string) (Observation, bool) {
	return shareBlocks(req, replicaID, p.cfg.BlockChars)
}

// Observe implements Sharer: records o's hashes as sent to its replica, as Pick does.
func (p *PrefixCache) Observe(o Observation) bool {
	return observeBlocks(&p.mu, p.index, p.cfg.BlockChars, o)
}
