package upstream

import "errors"

// ErrNoHealthyReplica is returned when a pool has no replica that may take a
// request (all ejected, draining or failing their health checks).
var ErrNoHealthyReplica = errors.New("no healthy replica")

// ErrRejected is returned by an Admitter that refuses a request.
var ErrRejected = errors.New("request rejected by admission policy")

// Request is what a replica policy knows about one request. It is built once
// per request by the pool and never mutated by a policy.
type Request struct {
	// Prompt is the text used for prefix hashing: the rendered messages (or
	// the completion prompt) in order, so requests sharing a system prompt
	// or earlier turns share leading blocks.
	Prompt string
	// InputTokens is an estimate of the prompt's token count (len/4 when no
	// tokenizer is at hand).
	InputTokens int
	// User identifies the caller for fairness (vtc-basic); may be empty.
	User string
	// Session identifies a conversation for affinity (lmetric sticky/unified);
	// may be empty.
	Session string
}

// Candidate is a policy's snapshot of one healthy replica at decision time.
type Candidate struct {
	// ID is the replica's stable identifier (its URL unless configured).
	ID string
	// InFlight is the router-local count of requests sent to the replica and
	// not yet finished. Exact and always fresh.
	InFlight int
	// Waiting, Running and KVUtilization come from the replica's /metrics and
	// are stale by up to the scrape interval. Fresh reports whether they were
	// scraped at all (a replica without /metrics has Fresh false and zeros).
	Waiting       int
	Running       int
	KVUtilization float64 // 0..1
	Fresh         bool
	// Weight is the configured replica weight (default 1).
	Weight float64
}

// Picker chooses one replica for a request.
//
// Contract: cands is non-empty and holds only replicas that may take the
// request; Pick returns an index into cands. Pick may be called from many
// goroutines at once. A Picker that keeps state (prefix index, fairness
// counters) updates it inside Pick for the chosen replica, so the next
// decision sees it at once.
type Picker interface {
	Pick(req *Request, cands []Candidate) int
}

// Finisher is implemented by pickers that learn from completed requests
// (vtc-basic counts output tokens; lmetric tracks pending prefill).
// Done is called once per picked request, after its response ended.
type Finisher interface {
	Done(req *Request, replicaID string, outputTokens int)
}

// Admitter decides whether a request may enter a pool at all.
type Admitter interface {
	// Admit returns nil or ErrRejected. It must not block.
	Admit(req *Request) error
}
