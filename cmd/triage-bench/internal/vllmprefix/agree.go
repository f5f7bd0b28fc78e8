package vllmprefix

// Outcome is what one request of the trace found out: the gateway's prediction and the
// engine's answer.
type Outcome struct {
	// Predicted is x-router-predicted-cached-tokens: the leading prompt tokens the
	// chosen replica's engine had reported stored when it was picked (whole blocks);
	// HasPrediction is false when the header was absent (no live events for the replica,
	// or no token ids). Pending is x-router-pending-cached-tokens: the further tokens the
	// policy counted as held there because earlier picks had just sent them.
	Predicted     int
	Pending       int
	HasPrediction bool
	// Cached and Prompt are the engine's usage.prompt_tokens_details.cached_tokens and
	// usage.prompt_tokens.
	Cached int
	Prompt int
}

// Agreement counts how often the gateway's prediction matched the engine, over the
// requests that completed with a usage report.
//
// Definitions, per request with a prediction p and the engine's cached_tokens c:
//   - hit agrees: (p > 0) == (c > 0), the question a router asks ("is it warm there?");
//   - within a block: |p − c| <= the block size. vLLM never serves a prompt's last token
//     from the cache (it must compute at least one token to sample from), so a prompt
//     that is fully cached and a whole number of blocks long reports one block less than
//     it holds, which this tolerance forgives, and so does nothing else;
//   - agrees: both of the above;
//   - exact: p == c.
//
// A request without a prediction agrees with nothing: the rates divide by Requests, not
// by Predicted.
type Agreement struct {
	Requests    int `json:"requests"`
	Predicted   int `json:"predicted"`
	HitAgrees   int `json:"hit_agrees"`
	WithinBlock int `json:"within_block"`
	Agrees      int `json:"agrees"`
	Exact       int `json:"exact"`
	// Over and Under count the disagreements by direction: the gateway predicted more
	// (a stale index, pending blocks the engine did not keep) or less (blocks it did not
	// know of) than the engine served, by more than a block.
	Over  int `json:"over"`
	Under int `json:"under"`
}

// Agree computes the agreement of outcomes for engines with blocks of blockSize tokens.
func Agree(outcomes []Outcome, blockSize int) Agreement {
	var a Agreement
	for _, o := range outcomes {
		a.Requests++
		if !o.HasPrediction {
			continue
		}
		a.Predicted++
		hit := (o.Predicted > 0) == (o.Cached > 0)
		d := o.Predicted - o.Cached
		within := d <= blockSize && d >= -blockSize
		if hit {
			a.HitAgrees++
		}
		if within {
			a.WithinBlock++
		} else if d > 0 {
			a.Over++
		} else {
			a.Under++
		}
		if hit && within {
			a.Agrees++
		}
		if d == 0 {
			a.Exact++
		}
	}
	return a
}

// WithPending returns the outcomes with the pending tokens added to the prediction: what
// the policy routed on rather than what the engine had reported.
func WithPending(outcomes []Outcome) []Outcome {
	out := make([]Outcome, len(outcomes))
	for i, o := range outcomes {
		o.Predicted += o.Pending
		out[i] = o
	}
	return out
}

// Rate is n over the requests, NaN-free: 0 without requests.
func (a Agreement) Rate(n int) float64 {
	if a.Requests == 0 {
		return 0
	}
	return float64(n) / float64(a.Requests)
}
