package policy

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
)

// Scorer names for WeightedConfig.Scorers: the scorers of the BLIS cluster
// simulator, which follow llm-d's endpoint picker.
const (
	ScorerPrefixAffinity = "prefix-affinity" // share of the request's blocks in the replica's index
	ScorerQueueDepth     = "queue-depth"     // min-max normalised Waiting+InFlight, lower load is better
	ScorerKVUtilization  = "kv-utilization"  // 1 − KVUtilization
	ScorerLoadBalance    = "load-balance"    // 1/(1+InFlight)
)

// scorerKinds maps scorer names to their implementation.
var scorerKinds = map[string]scorerKind{
	ScorerPrefixAffinity: scorePrefixAffinity,
	ScorerQueueDepth:     scoreQueueDepth,
	ScorerKVUtilization:  scoreKVUtilization,
	ScorerLoadBalance:    scoreLoadBalance,
}

// ScorerNames lists the weighted policy's scorers, sorted.
func ScorerNames() []string { return slices.Sorted(maps.Keys(scorerKinds)) }

// DefaultScorerWeights returns llm-d's weights, which BLIS also uses.
func DefaultScorerWeights() map[string]float64 {
	return map[string]float64{ScorerPrefixAffinity: 3, ScorerQueueDepth: 2, ScorerKVUtilization: 2}
}

// WeightedConfig tunes the weighted policy.
type WeightedConfig struct {
	// Scorers maps scorer name to weight (>= 0, at least one > 0). Weights
	// are normalised to sum 1, so only ratios matter. Default
	// DefaultScorerWeights (prefix-affinity:3, queue-depth:2,
	// kv-utilization:2); nil means the same. In YAML a scorers mapping
	// replaces the whole map, so scorers it leaves out weigh 0. An empty map
	// is an error, not the default.
	Scorers map[string]float64 `yaml:"scorers" json:"scorers"`
	// BlockChars is the prefix block size in characters. Default 128.
	BlockChars int `yaml:"block_chars" json:"block_chars"`
	// IndexBlocks bounds each replica's router-side LRU index of block
	// hashes. Default 10000 (BLIS).
	IndexBlocks int `yaml:"index_blocks" json:"index_blocks"`
}

func init() {
	register("weighted", "weighted", DefaultWeightedConfig, func(c WeightedConfig, env Env) (Picker, error) {
		p, err := NewWeighted(c)
		if err == nil {
			p.index.evicted = evictFunc(env)
		}
		return picker(p, err)
	})
}

// DefaultWeightedConfig returns the BLIS cluster simulator's defaults.
func DefaultWeightedConfig() WeightedConfig {
	return WeightedConfig{Scorers: DefaultScorerWeights(), BlockChars: 128, IndexBlocks: 10_000}
}

// MarshalYAML writes c with nil Scorers spelled out as the default weights
// they stand for: an empty scorers mapping would read back as an error.
func (c WeightedConfig) MarshalYAML() (any, error) {
	type plain WeightedConfig // without this method
	if c.Scorers == nil {
		c.Scorers = DefaultScorerWeights()
	}
	return plain(c), nil
}

// clone implements cloner: Scorers is a map.
func (c WeightedConfig) clone() Section {
	c.Scorers = maps.Clone(c.Scorers)
	return c
}

// ValidateAt reports every invalid field, each named from path
// ("pools.fast.policy.weighted" in a pool's config).
func (c WeightedConfig) ValidateAt(path string) error {
	errs := validateBlocks(path, c.BlockChars, c.IndexBlocks)
	if c.Scorers == nil {
		return errors.Join(errs...)
	}
	var sum float64
	for _, name := range slices.Sorted(maps.Keys(c.Scorers)) {
		w := c.Scorers[name]
		if _, ok := scorerKinds[name]; !ok {
			errs = append(errs, fmt.Errorf("%s.scorers.%s: unknown scorer (want one of %s)",
				path, name, strings.Join(ScorerNames(), ", ")))
			continue
		}
		if !validNonNeg(w) {
			errs = append(errs, fmt.Errorf("%s.scorers.%s: weight must be a finite number >= 0, got %v", path, name, w))
			continue
		}
		sum += w
	}
	if sum <= 0 && len(errs) == 0 {
		errs = append(errs, fmt.Errorf("%s.scorers: need at least one scorer with weight > 0", path))
	}
	return errors.Join(errs...)
}

type scorerKind uint8

const (
	scorePrefixAffinity scorerKind = iota
	scoreQueueDepth
	scoreKVUtilization
	scoreLoadBalance
)

type weightedScorer struct {
	name   string
	kind   scorerKind
	weight float64 // normalised: all weights sum to 1
}

// Weighted is the BLIS / llm-d endpoint-picker policy. Each scorer gives
// every candidate a score in [0,1], 1 is best; the total is the sum of
// scores times normalised weights, so it is in [0,1] too. The highest
// total wins; exact ties go round-robin.
//
//   - prefix-affinity: share of the request's block hashes found (anywhere,
//     not only as a leading run) in the replica's router-side LRU index,
//     which is updated right after each decision. 0 for an empty prompt.
//     Where Request.Cache knows the replica, the share of the prompt it
//     holds as a leading run by its KV-cache events instead.
//   - queue-depth: effective load Waiting+InFlight, min-max normalised
//     across candidates, (max−load)/(max−min); all equal → all 1.
//   - kv-utilization: 1 − KVUtilization, clamped to [0,1]. A replica with
//     no scraped metrics, or whose engine exports no KV-cache usage
//     (KVUnknown), reads as empty (score 1).
//   - load-balance: 1/(1+InFlight).
//
// Traces score candidates by the weighted total (higher is better).
//
// Concurrency: one mutex guards the index and scratch buffers.
type Weighted struct {
	traced
	scorers   []weightedScorer // sorted by name, for a fixed summation order
	needIndex bool
	blocks    int
	rr        rotor

	mu    sync.Mutex
	index *prefixIndex
	total []float64 // scratch
	part  []float64 // scratch
}

var (
	_ Picker = (*Weighted)(nil)
	_ Sharer = (*Weighted)(nil)
)

// NewWeighted validates cfg and returns a weighted picker.
func NewWeighted(cfg WeightedConfig) (*Weighted, error) {
	if err := cfg.ValidateAt("weighted"); err != nil {
		return nil, err
	}
	weights := cfg.Scorers
	if weights == nil {
		weights = DefaultScorerWeights()
	}
	var sum float64
	for _, w := range weights {
		sum += w
	}
	p := &Weighted{blocks: cfg.BlockChars, index: newPrefixIndex(cfg.IndexBlocks)}
	for _, name := range slices.Sorted(maps.Keys(weights)) {
		if weights[name] == 0 {
			continue
		}
		kind := scorerKinds[name]
		p.scorers = append(p.scorers, weightedScorer{name: name, kind: kind, weight: weights[name] / sum})
		p.needIndex = p.needIndex || kind == scorePrefixAffinity
	}
	return p, nil
}

// Weights returns the normalised weight of each scorer in use (they sum
// to 1).
func (p *Weighted) Weights() map[string]float64 {
	out := make(map[string]float64, len(p.scorers))
	for _, s := range p.scorers {
		out[s.name] = s.weight
	}
	return out
}

// Pick implements Picker.
func (p *Weighted) Pick(req *Request, cands []Candidate) int {
	var hashes []uint64
	if p.needIndex {
		buf, _ := blockHashesPooled(req.Prompt, p.blocks)
		defer releaseHashes(buf)
		hashes = *buf
	}

	p.mu.Lock()
	defer p.mu.Unlock()

	n := len(cands)
	p.total = growFloats(p.total, n)
	p.part = growFloats(p.part, n)
	total, part := p.total, p.part
	clear(total)
	for _, s := range p.scorers {
		p.score(s.kind, req, hashes, cands, part)
		for i, v := range part {
			total[i] += s.weight * min(max(v, 0), 1)
		}
	}

	best, count := total[0], 0
	for _, v := range total {
		switch {
		case v > best:
			best, count = v, 1
		case v == best:
			count++
		}
	}
	chosen := nthTied(n, p.rr.turn(count), func(i int) bool { return total[i] == best })

	if p.needIndex {
		p.index.record(cands[chosen].ID, hashes)
	}
	p.tracer.Record(cands, total, chosen, false, "")
	return chosen
}

// score writes one scorer's value for every candidate into out.
// Contract: values are in [0,1], 1 is best. Caller holds p.mu.
func (p *Weighted) score(kind scorerKind, req *Request, hashes []uint64, cands []Candidate, out []float64) {
	switch kind {
	case scorePrefixAffinity:
		for i, c := range cands {
			var ok bool
			if out[i], ok = viewShare(req, c.ID); ok {
				continue
			}
			out[i] = 0
			if len(hashes) > 0 {
				out[i] = float64(p.index.countPresent(c.ID, hashes)) / float64(len(hashes))
			}
		}
	case scoreQueueDepth:
		lo, hi := cands[0].Waiting+cands[0].InFlight, cands[0].Waiting+cands[0].InFlight
		for _, c := range cands {
			l := c.Waiting + c.InFlight
			lo, hi = min(lo, l), max(hi, l)
		}
		for i, c := range cands {
			out[i] = 1
			if hi > lo {
				out[i] = float64(hi-(c.Waiting+c.InFlight)) / float64(hi-lo)
			}
		}
	case scoreKVUtilization:
		for i, c := range cands {
			out[i] = 1
			if !c.KVUnknown {
				out[i] = 1 - c.KVUtilization
			}
		}
	case scoreLoadBalance:
		for i, c := range cands {
			out[i] = 1 / (1 + float64(max(c.InFlight, 0)))
		}
	}
}

// Share implements Sharer: the prompt's block hashes when the prefix-affinity scorer is in
// use (without it the policy keeps no index and there is nothing to share).
func (p *Weighted) Share(req *Request, replicaID string) (Observation, bool) {
	if !p.needIndex {
		return Observation{}, false
	}
	hs := shareHashes(req.Prompt, p.blocks)
	if len(hs) == 0 {
		return Observation{}, false
	}
	return Observation{ReplicaID: replicaID, BlockChars: p.blocks, Hashes: hs}, true
}

// Observe implements Sharer: records o's hashes in the prefix-affinity index, as Pick does.
func (p *Weighted) Observe(o Observation) bool {
	if !p.needIndex || o.BlockChars != p.blocks || len(o.Hashes) == 0 {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.index.record(o.ReplicaID, o.Hashes)
	return true
}
