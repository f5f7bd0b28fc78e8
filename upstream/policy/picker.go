package policy

import "time"

// Request is what a replica policy knows about one request. The caller of
// the pool builds it once per request (upstream.ForwardRequest.Routing); a
// policy never mutates it.
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
	// Cache, when set, says for some replicas how much of the prompt they
	// hold, from their own KV-cache events; the prefix-aware policies use it
	// for those replicas instead of their guess (see CacheView). Nil: the
	// guess for every replica. The pool sets it before Pick.
	Cache CacheView
	// TTFTTarget is the time to first token the caller asked for (the
	// x-slo-ttft-ms request header); 0 means none, and the SLO policies
	// then use their pool's default target. Other policies ignore it.
	TTFTTarget time.Duration
}

// Candidate is a policy's snapshot of one healthy replica at decision time.
type Candidate struct {
	// ID is the replica's stable identifier (its URL unless configured).
	ID string
	// InFlight is the count of requests sent to the replica and not yet
	// finished. In local mode it is this gateway's own: exact and always
	// fresh. In fleet mode it is the fleet's: this gateway's own, exact, plus
	// the other gateways' as of their latest snapshots (published every
	// fleet.affinity.load_interval, dropped after load_expiry or at once
	// when Redis is down).
	InFlight int
	// Waiting, Running and KVUtilization come from the replica's /metrics and
	// are stale by up to the scrape interval. Fresh reports whether they were
	// scraped at all (a replica without /metrics has Fresh false and zeros).
	// KVUnknown is set when the replica's engine exports no KV-cache usage
	// at all (llama.cpp's and TGI's current releases do not): KVUtilization
	// is then 0 and means unknown, not empty.
	Waiting       int
	Running       int
	KVUtilization float64 // 0..1
	KVUnknown     bool
	Fresh         bool
	// The signals below are derived from the replica's counters and
	// histograms by comparing its two latest successful scrapes, so they
	// describe the interval between them (about one scrape interval) and
	// are as stale as the other scraped values; Fresh covers them too.
	//
	// PromptTokensPerSec and GenerationTokensPerSec are the rates of
	// vllm:prompt_tokens_total and vllm:generation_tokens_total. Rates
	// reports whether they are known: false until the second scrape and
	// for the interval in which a counter went down (a restart).
	PromptTokensPerSec     float64
	GenerationTokensPerSec float64
	Rates                  bool
	// MeanTTFT and MeanTPOT are the mean time to first token and time per
	// output token in seconds, from vllm:time_to_first_token_seconds and
	// vllm:inter_token_latency_seconds (older vLLM:
	// vllm:time_per_output_token_seconds): the histogram's sum over its
	// count, for the samples added in the latest interval that had any. An
	// interval without samples (an idle replica) keeps the previous mean.
	// HasTTFT and HasTPOT report whether there is a mean at all.
	MeanTTFT float64
	MeanTPOT float64
	HasTTFT  bool
	HasTPOT  bool
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
// (least-busy-time ends the request's busy time; lmetric tracks pending
// prefill; prefix-cache-preble moves its expected output length; vtc-basic counts
// output tokens).
// Done is called once per picked request, after its response ended.
type Finisher interface {
	Done(req *Request, replicaID string, outputTokens int)
}

// TTFTObserver is implemented by pickers that learn each replica's time to
// first token against its load (the SLO family). The pool calls
// ObserveTTFT at most once per picked request: when the first token event
// of a streamed 2xx answer arrives. ttft runs from sending the request to
// that event; inFlight is the replica's Candidate.InFlight when it was
// picked (the load the request met, not counting itself). Non-streamed
// answers are not observed: their first token is not visible.
type TTFTObserver interface {
	ObserveTTFT(req *Request, replicaID string, inFlight int, ttft time.Duration)
}

// growFloats returns buf resized to n, reallocating only when too small: the
// policies keep one per-candidate score buffer each and reuse it.
func growFloats(buf []float64, n int) []float64 {
	if cap(buf) < n {
		return make([]float64, n)
	}
	return buf[:n]
}
