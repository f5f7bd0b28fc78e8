package trace

import (
	"github.com/triage-gw/triage/bench/stats"
	"github.com/triage-gw/triage/sim"
)

// Stats describes a trace's shape for a report header.
type Stats struct {
	Requests       int           `json:"requests"`
	Sessions       int           `json:"sessions"`
	HeavySessions  int           `json:"heavy_sessions"`
	HeavyRequests  int           `json:"heavy_requests"`
	InputTokens    stats.Summary `json:"input_tokens"` // "ms" fields hold tokens here
	DistinctBlocks int           `json:"distinct_blocks"`
	BlockChars     int           `json:"block_chars"`
	Span           float64       `json:"span_s"`
}

// Stats summarises t; distinct blocks are counted the way the simulator
// keys its prefix cache (chained hashes of blockChars-byte blocks), so
// DistinctBlocks is the KV working set of the whole trace.
func (t *Trace) Stats(blockChars int) Stats {
	st := Stats{Requests: len(t.Requests), Sessions: t.Sessions, HeavySessions: t.Heavy, BlockChars: blockChars}
	toks := make([]float64, 0, len(t.Requests))
	seen := make(map[uint64]struct{})
	for _, r := range t.Requests {
		toks = append(toks, float64(r.InputTokens))
		if r.Heavy {
			st.HeavyRequests++
		}
		for _, h := range sim.BlockHashes(r.Prompt, blockChars) {
			seen[h] = struct{}{}
		}
	}
	st.InputTokens = stats.SummarizeFloats(toks)
	st.DistinctBlocks = len(seen)
	if n := len(t.Requests); n > 0 {
		st.Span = t.Requests[n-1].At.Seconds()
	}
	return st
}
