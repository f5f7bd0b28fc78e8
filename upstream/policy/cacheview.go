package policy

// CacheView tells the prefix-aware policies (prefix-cache,
// prefix-cache-preble, lmetric, weighted's prefix-affinity) how much of one
// request's prompt some replicas hold, from what the replicas themselves
// report (their engines' KV-cache events), instead of the policy's own guess
// from what was sent where.
//
// Contract: Cached returns the share of the request's prompt, in [0, 1],
// that replica id holds as a leading run of cached blocks, and false when
// the view has nothing current to say about that replica (it publishes no
// events, or they stopped); the policy then uses its own guess for that
// replica alone, so a pool may mix replicas with and without events. Cached
// is called with the policy's lock held: it must be quick, must not block
// on I/O and must not call back into the policy. It may be called from many
// goroutines at once.
type CacheView interface {
	Cached(id string) (share float64, ok bool)
}

// viewShare is req.Cache's answer for replica id, if any.
func viewShare(req *Request, id string) (float64, bool) {
	if req.Cache == nil {
		return 0, false
	}
	s, ok := req.Cache.Cached(id)
	if !ok {
		return 0, false
	}
	return min(max(s, 0), 1), true
}
