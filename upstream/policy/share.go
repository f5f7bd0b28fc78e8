package policy

import (
	"sync"

	"github.com/cespare/xxhash/v2"
)

// Observation is what one gateway of a fleet tells the others about a pick it made, so that
// their copies of the policy learn where a prompt's prefix and a session went. It holds
// hashes and a replica ID only, never prompt text or a client's session key.
type Observation struct {
	// ReplicaID is the replica the request was sent to.
	ReplicaID string
	// Session is the hash of the request's session key (SessionHash); 0 when the request had
	// none or the policy keeps no sessions.
	Session uint64
	// BlockChars is the block size Hashes were computed with. A receiver whose policy cuts
	// prompts into blocks of another size ignores Hashes: they would never match its own.
	BlockChars int
	// Hashes are the prompt's chained block hashes, leading block first, at most
	// MaxShareBlocks of them.
	Hashes []uint64
}

// MaxShareBlocks bounds Observation.Hashes. Affinity is decided by the leading blocks, so a
// longer prompt shares its first MaxShareBlocks (128 KiB of text at the default 128-character
// blocks; 8 KiB of hashes).
const MaxShareBlocks = 1024

// Sharer is implemented by policies whose per-gateway state (a prefix index, session
// bindings) the other gateways of a fleet can learn, so that a conversation whose turns
// arrive at different gateways still reaches the replica that holds its prefix.
//
// Contract:
//
//   - Share(req, replicaID) returns what another gateway needs to repeat the state change
//     that Pick made when it chose replicaID for req: the prompt's block hashes as this
//     policy computes them, with the block size, and the session hash when the policy keeps
//     sessions. It reports false when there is nothing to share. It changes no state, and
//     the Observation shares no memory with the policy.
//   - Observe(o) applies a pick made by another gateway to this policy's state exactly as
//     its own Pick updates it for the chosen replica — prefix index, session binding — but
//     charges no load: no pending prefill, nothing for Done to release, no fairness count.
//     It reports whether anything was applied: false when o is of no use to this policy
//     (hashes of another block size and no session it would keep).
//   - Both are safe for concurrent use with Pick and Done.
//
// Observations are hints: one that is lost, late, repeated or out of order costs at most a
// cache hit, never a failed request. A policy records them in the same bounded structures as
// its own picks, so they cannot grow its memory beyond its config.
type Sharer interface {
	Share(req *Request, replicaID string) (Observation, bool)
	Observe(o Observation) bool
}

// SessionHash is the key under which policies keep a session: a 64-bit hash of the
// request's session key, or 0 for none. Keeping hashes bounds memory per session whatever
// the key's length, and lets gateways share bindings without sending the key itself.
func SessionHash(session string) uint64 {
	if session == "" {
		return 0
	}
	if h := xxhash.Sum64String(session); h != 0 {
		return h
	}
	return 1 // 0 means none
}

// shareHashes returns the leading block hashes of prompt for an Observation: a fresh slice,
// at most MaxShareBlocks long.
// shareBlocks is Share for a policy whose only shared state is its prefix index: the prompt's
// block hashes, as recorded for replicaID.
func shareBlocks(req *Request, replicaID string, blockChars int) (Observation, bool) {
	hs := shareHashes(req.Prompt, blockChars)
	if len(hs) == 0 {
		return Observation{}, false
	}
	return Observation{ReplicaID: replicaID, BlockChars: blockChars, Hashes: hs}, true
}

// observeBlocks is Observe for such a policy: o's hashes recorded in x (under mu) as sent to
// o's replica, when they were cut into blocks of the policy's size.
func observeBlocks(mu *sync.Mutex, x *prefixIndex, blockChars int, o Observation) bool {
	if o.BlockChars != blockChars || len(o.Hashes) == 0 {
		return false
	}
	mu.Lock()
	defer mu.Unlock()
	x.record(o.ReplicaID, o.Hashes)
	return true
}

func shareHashes(prompt string, blockChars int) []uint64 {
	// Hash no further than the blocks that will be shared: MaxShareBlocks blocks of at most
	// blockChars runes are at most 4 × blockChars bytes each.
	if limit := MaxShareBlocks * blockChars * 4; len(prompt) > limit {
		prompt = prompt[:limit]
	}
	hs, _ := appendBlockHashes(make([]uint64, 0, len(prompt)/blockChars+1), prompt, blockChars)
	if len(hs) > MaxShareBlocks {
		hs = hs[:MaxShareBlocks]
	}
	return hs
}
