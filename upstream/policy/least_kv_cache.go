package policy

// Names of the least-kv-cache policy. least-gpu-cache is the same policy
// under the name AIBrix gives its router for vLLM's older metric
// (vllm:gpu_cache_usage_perc, called vllm:kv_cache_usage_perc since vLLM's
// V1 engine).
const (
	nameLeastKVCache  = "least-kv-cache"
	nameLeastGPUCache = "least-gpu-cache"
)

func init() {
	build := func(noSettings, Env) (Picker, error) { return NewLeastKVCache(), nil }
	register(nameLeastKVCache, "", nil, build)
	register(nameLeastGPUCache, "", nil, build)
}

// LeastKVCache picks the candidate whose KV cache is least used, after
// AIBrix's least-kv-cache and least-gpu-cache routers.
//
// Signal: Candidate.KVUtilization, the replica's vllm:kv_cache_usage_perc
// (or vllm:gpu_cache_usage_perc from older vLLM) as last scraped, a
// fraction in [0, 1]. AIBrix's least-kv-cache adds vLLM's CPU-swap cache
// usage (vllm:cpu_cache_usage_perc); vLLM's V1 engine no longer exports
// it, so this policy reads the GPU cache alone.
//
// Staleness: up to three scrape intervals (pools.*.scrape_interval, 2 s by
// default); the value does not move between scrapes, so a burst arriving
// within one interval lands on the replica that was emptiest at the last
// scrape, spread only by the tie-break below.
//
// Ties: fewest in-flight requests, then round-robin. Missing or stale
// signal (a candidate with Fresh false, or whose engine exports no KV-cache
// usage: KVUnknown): least-request over all the candidates (see
// pickLowest).
//
// Concurrency: lock-free; safe for concurrent Pick.
type LeastKVCache struct {
	traced
	rr rotor
}

var _ Picker = (*LeastKVCache)(nil)

// NewLeastKVCache returns a least-kv-cache picker.
func NewLeastKVCache() *LeastKVCache { return &LeastKVCache{} }

// Pick implements Picker.
func (p *LeastKVCache) Pick(_ *Request, cands []Candidate) int {
	return pickLowest(cands, kvCacheSignal, &p.rr, p.tracer)
}

func kvCacheSignal(c *Candidate) (float64, bool) { return c.KVUtilization, c.Fresh && !c.KVUnknown }
