package policy

import (
	"errors"
	"fmt"
	"sync"
)

// LMetric variants, as in the agentic-KV-cache policy study (its B3
// policies) that lmetric comes from.
const (
	LMetricPlain   = ""        // per-request scoring, no affinity
	LMetricSticky  = "sticky"  // hard session affinity
	LMetricUnified = "unified" // affinity gated by cache warmth and load
)

// LMetricConfig tunes the lmetric policy.
type LMetricConfig struct {
	// Variant is "" (plain), "sticky" or "unified". Default "".
	Variant string `yaml:"variant" json:"variant"`
	// BlockChars is the prefix block size in characters. Default 128.
	BlockChars int `yaml:"block_chars" json:"block_chars"`
	// IndexBlocks bounds each replica's index of block hashes. Default 200000.
	IndexBlocks int `yaml:"index_blocks" json:"index_blocks"`
	// MaxSessions bounds the session→replica affinity table (sticky,
	// unified); the least recently routed session is forgotten beyond it.
	// Default 100000.
	MaxSessions int `yaml:"max_sessions" json:"max_sessions"`
	// AffinityMinHitRatio (unified): stick only while the affinity
	// replica's estimated cache hit / input tokens is above it. Default 0.5.
	AffinityMinHitRatio float64 `yaml:"affinity_min_hit_ratio" json:"affinity_min_hit_ratio"`
	// OverloadFactor (unified): stick only while the affinity replica's
	// InFlight <= OverloadFactor × max(mean InFlight, 1). Default 2.
	OverloadFactor float64 `yaml:"overload_factor" json:"overload_factor"`
}

func init() {
	register("lmetric", "lmetric", DefaultLMetricConfig, func(c LMetricConfig, env Env) (Picker, error) {
		p, err := NewLMetric(c)
		if err == nil {
			p.evicted = evictFunc(env)
			p.index.evicted = p.evicted
		}
		return picker(p, err)
	})
}

// DefaultLMetricConfig returns plain lmetric with the study's constants.
func DefaultLMetricConfig() LMetricConfig {
	return LMetricConfig{
		BlockChars:          128,
		IndexBlocks:         200_000,
		MaxSessions:         100_000,
		AffinityMinHitRatio: 0.5,
		OverloadFactor:      2,
	}
}

// ValidateAt reports every invalid field, each named from path
// ("pools.fast.policy.lmetric" in a pool's config).
func (c LMetricConfig) ValidateAt(path string) error {
	var errs []error
	switch c.Variant {
	case LMetricPlain, LMetricSticky, LMetricUnified:
	default:
		errs = append(errs, fmt.Errorf("%s.variant: must be \"\", %q or %q, got %q", path, LMetricSticky, LMetricUnified, c.Variant))
	}
	errs = append(errs, validateBlocks(path, c.BlockChars, c.IndexBlocks)...)
	if c.MaxSessions < 1 || c.MaxSessions > maxIndexBlocks {
		errs = append(errs, fmt.Errorf("%s.max_sessions: must be in [1, %d], got %d", path, maxIndexBlocks, c.MaxSessions))
	}
	if !(c.AffinityMinHitRatio >= 0 && c.AffinityMinHitRatio <= 1) {
		errs = append(errs, fmt.Errorf("%s.affinity_min_hit_ratio: must be in [0, 1], got %v", path, c.AffinityMinHitRatio))
	}
	if !validPos(c.OverloadFactor) {
		errs = append(errs, fmt.Errorf("%s.overload_factor: must be a finite number > 0, got %v", path, c.OverloadFactor))
	}
	return errors.Join(errs...)
}

// LMetric is the lmetric policy of the agentic-KV-cache policy study (its B3
// policies). For each candidate:
//
//	cache_hit   = InputTokens × matched_chars / prompt_chars
//	new_prefill = max(0, InputTokens − cache_hit)
//	score       = (pending_prefill + new_prefill) × InFlight
//
// where matched_chars is the leading run of the prompt's blocks found in
// the router-side index of what the replica was sent (or, where
// Request.Cache knows the replica, cache_hit = InputTokens × the share it
// reports from the replica's KV-cache events), and pending_prefill
// is the sum of new_prefill of requests picked for the replica and not yet
// Done. InFlight stands in for the study's running batch size. Lowest score
// wins; ties go to the smaller new_prefill (the warmer cache), then the
// smaller InFlight, then round-robin.
//
// Variant sticky binds a session to its first pick and keeps it there
// while that replica is a candidate. Variant unified keeps the binding only
// while the bound replica's cache_hit/InputTokens > AffinityMinHitRatio and
// its InFlight <= OverloadFactor × max(mean InFlight, 1); otherwise it
// scores as above. Both rebind the session to whatever was picked.
//
// Traces score candidates by the lmetric score (lower is better).
//
// Concurrency: one mutex guards the index, pending counts and sessions.
// Done must be given the same *Request pointer that was passed to Pick.
type LMetric struct {
	traced
	cfg LMetricConfig
	rr  rotor

	mu       sync.Mutex
	index    *prefixIndex
	pending  map[string]int64           // replica ID → pending prefill tokens
	inflight map[*Request]lmetricCharge // picked and not yet Done
	sessions *lru[uint64, string]       // SessionHash(session) → replica ID
	evicted  func(table string, n int)  // Env.Evicted
	keys     []lmetricKey               // scratch
	scores   []float64                  // scratch for tracing
}

type lmetricCharge struct {
	replica string
	tokens  int64
}

type lmetricKey struct {
	score, newPrefill, hit int64
	inFlight               int
}

// less orders keys by (score, new prefill, InFlight).
func (a lmetricKey) less(b lmetricKey) bool {
	if a.score != b.score {
		return a.score < b.score
	}
	if a.newPrefill != b.newPrefill {
		return a.newPrefill < b.newPrefill
	}
	return a.inFlight < b.inFlight
}

func (a lmetricKey) tied(b lmetricKey) bool {
	return a.score == b.score && a.newPrefill == b.newPrefill && a.inFlight == b.inFlight
}

var (
	_ Picker   = (*LMetric)(nil)
	_ Finisher = (*LMetric)(nil)
	_ Sharer   = (*LMetric)(nil)
)

// NewLMetric validates cfg and returns an lmetric picker.
func NewLMetric(cfg LMetricConfig) (*LMetric, error) {
	if err := cfg.ValidateAt("lmetric"); err != nil {
		return nil, err
	}
	p := &LMetric{
		cfg:      cfg,
		index:    newPrefixIndex(cfg.IndexBlocks),
		pending:  make(map[string]int64),
		inflight: make(map[*Request]lmetricCharge),
		evicted:  func(string, int) {},
	}
	if cfg.Variant != LMetricPlain {
		p.sessions = newLRU[uint64, string](cfg.MaxSessions)
	}
	return p, nil
}

// Pick implements Picker.
func (p *LMetric) Pick(req *Request, cands []Candidate) int {
	buf, runes := blockHashesPooled(req.Prompt, p.cfg.BlockChars)
	defer releaseHashes(buf)
	hashes := *buf
	input := int64(max(req.InputTokens, 0))

	p.mu.Lock()
	defer p.mu.Unlock()

	n := len(cands)
	if cap(p.keys) < n {
		p.keys = make([]lmetricKey, n)
	}
	keys := p.keys[:n]
	sumInFlight := 0
	for i, c := range cands {
		var hit int64
		if share, ok := viewShare(req, c.ID); ok {
			hit = int64(float64(input) * share)
		} else if runes > 0 {
			m := p.index.leadingMatch(c.ID, hashes)
			hit = input * int64(matchedChars(m, p.cfg.BlockChars, runes)) / int64(runes)
		}
		newPrefill := max(0, input-hit)
		keys[i] = lmetricKey{
			score:      (p.pending[c.ID] + newPrefill) * int64(c.InFlight),
			newPrefill: newPrefill,
			hit:        hit,
			inFlight:   c.InFlight,
		}
		sumInFlight += c.InFlight
	}

	chosen, note := p.affinity(req, cands, keys, sumInFlight), "affinity"
	if chosen < 0 {
		note = ""
		best, count := keys[0], 0
		for _, k := range keys {
			switch {
			case k.less(best):
				best, count = k, 1
			case k.tied(best):
				count++
			}
		}
		chosen = nthTied(n, p.rr.turn(count), func(i int) bool { return keys[i].tied(best) })
	}

	id := cands[chosen].ID
	p.index.record(id, hashes)
	if old, ok := p.inflight[req]; ok { // picked again (a retry): drop the old charge
		p.release(old)
	}
	charge := lmetricCharge{replica: id, tokens: keys[chosen].newPrefill}
	p.pending[id] += charge.tokens
	p.inflight[req] = charge
	if p.sessions != nil && req.Session != "" && p.sessions.put(SessionHash(req.Session), id) {
		p.evicted(TableSessions, 1)
	}

	if t := p.tracer; t != nil {
		p.scores = growFloats(p.scores, n)
		for i, k := range keys {
			p.scores[i] = float64(k.score)
		}
		t.Record(cands, p.scores, chosen, true, note)
	}
	return chosen
}

// affinity returns the candidate the session is bound to when the variant
// says to stay there, else -1. Caller holds p.mu.
func (p *LMetric) affinity(req *Request, cands []Candidate, keys []lmetricKey, sumInFlight int) int {
	if p.sessions == nil || req.Session == "" {
		return -1
	}
	id, ok := p.sessions.get(SessionHash(req.Session))
	if !ok {
		return -1
	}
	a := -1
	for i := range cands {
		if cands[i].ID == id {
			a = i
			break
		}
	}
	if a < 0 || p.cfg.Variant == LMetricSticky {
		return a
	}
	hitRatio := float64(keys[a].hit) / float64(max(req.InputTokens, 1))
	avg := max(float64(sumInFlight)/float64(len(cands)), 1)
	if hitRatio > p.cfg.AffinityMinHitRatio && float64(cands[a].InFlight) <= avg*p.cfg.OverloadFactor {
		return a
	}
	return -1
}

// Done implements Finisher: the request's new prefill stops counting as
// pending on its replica. Unknown or repeated requests are ignored, and so is
// the Done of an attempt on a replica the request is no longer charged to: a
// retry re-picks (moving the charge) before the failed attempt is discarded,
// and that discard must not remove the new attempt's charge.
func (p *LMetric) Done(req *Request, replicaID string, _ int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.inflight[req]; ok && c.replica == replicaID {
		delete(p.inflight, req)
		p.release(c)
	}
}

// release subtracts a charge from its replica's pending count. Caller holds p.mu.
func (p *LMetric) release(c lmetricCharge) {
	left := p.pending[c.replica] - c.tokens
	if left <= 0 {
		delete(p.pending, c.replica)
		return
	}
	p.pending[c.replica] = left
}

// Share implements Sharer: the prompt's block hashes and, for the sticky and unified
// variants, the session, both of which Pick bound to the replica.
func (p *LMetric) Share(req *Request, replicaID string) (Observation, bool) {
	o := Observation{ReplicaID: replicaID, BlockChars: p.cfg.BlockChars, Hashes: shareHashes(req.Prompt, p.cfg.BlockChars)}
	if p.sessions != nil {
		o.Session = SessionHash(req.Session)
	}
	return o, len(o.Hashes) > 0 || o.Session != 0
}

// Observe implements Sharer: records o's hashes in the index (when its block size is this
// policy's) and, for the sticky and unified variants, binds its session to its replica, as
// Pick does; no pending prefill is charged, so Done has nothing to release for it.
func (p *LMetric) Observe(o Observation) bool {
	useHashes := o.BlockChars == p.cfg.BlockChars && len(o.Hashes) > 0
	useSession := p.sessions != nil && o.Session != 0
	if !useHashes && !useSession {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if useHashes {
		p.index.record(o.ReplicaID, o.Hashes)
	}
	if useSession && p.sessions.put(o.Session, o.ReplicaID) {
		p.evicted(TableSessions, 1)
	}
	return true
}
