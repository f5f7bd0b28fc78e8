package vllmprefix

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/triage-gw/triage/bench/report"
	"github.com/triage-gw/triage/bench/stats"
)

// Report is what a run writes: results.json is it, table.md its Markdown.
type Report struct {
	Command       string         `json:"command"`
	Machine       report.Machine `json:"machine"`
	Config        config         `json:"config"`
	EngineStartup string         `json:"engine_startup"`
	Rows          []Row          `json:"rows"`
}

// Row is one policy run.
type Row struct {
	Key     string `json:"key"`
	Policy  string `json:"policy"`
	Variant string `json:"lmetric_variant,omitempty"`
	Events  bool   `json:"kv_events"`

	Requests   int    `json:"requests"`
	OK         int    `json:"ok"`
	FirstError string `json:"first_error,omitempty"`
	Wall       string `json:"wall"`

	// The engines' own prefix-cache counters over the run, in tokens, both engines
	// summed, and their ratio.
	EngineQueries  float64 `json:"engine_prefix_queries"`
	EngineHits     float64 `json:"engine_prefix_hits"`
	EngineHitRatio float64 `json:"engine_hit_ratio"`
	// UsageCached over UsagePrompt: the same from the answers' usage (cached_tokens over
	// prompt_tokens), which should match the counters.
	UsagePrompt int `json:"usage_prompt_tokens"`
	UsageCached int `json:"usage_cached_tokens"`

	TTFT       stats.Summary  `json:"ttft"`
	PerReplica map[string]int `json:"requests_per_replica"`
	// Agreement compares what the policy routed on (the engine-reported blocks and the
	// pending window) with cached_tokens; AgreementStored the engine-reported blocks alone.
	Agreement       Agreement `json:"agreement"`
	AgreementStored Agreement `json:"agreement_stored_only"`

	Tokenize map[string]float64 `json:"tokenize,omitempty"`
	// TokenizeMeanMs is the mean time a request spent on the engine's /tokenize
	// (triage_upstream_tokenize_seconds), uncached calls only.
	TokenizeMeanMs float64 `json:"tokenize_mean_ms,omitempty"`
	Fallbacks      float64 `json:"kv_fallbacks"`
	// EventsReceived counts the KV events the gateway received, by type (BlockRemoved:
	// evictions, which the small KV caches are there to cause).
	EventsReceived map[string]float64 `json:"kv_events_received,omitempty"`
	// Disagreements lists the first requests whose prediction did not agree, for reading.
	Disagreements []string `json:"disagreements,omitempty"`
}

// fill computes the row's numbers from the requests and the engines' counters.
func (row *Row) fill(results []result, before, after []cacheCounters, blockSize int) {
	var ttft []time.Duration
	var outcomes []Outcome
	row.PerReplica = map[string]int{}
	for _, r := range results {
		row.Requests++
		if r.Replica != "" {
			row.PerReplica[r.Replica]++
		}
		if r.Err != "" {
			if row.FirstError == "" {
				row.FirstError = fmt.Sprintf("%s turn %d: %s", r.Session, r.Turn, r.Err)
			}
			continue
		}
		row.OK++
		ttft = append(ttft, r.TTFT)
		outcomes = append(outcomes, r.Outcome)
		row.UsagePrompt += r.Outcome.Prompt
		row.UsageCached += r.Outcome.Cached
		o := r.Outcome
		if o.HasPrediction && !Agree(WithPending([]Outcome{o}), blockSize).agreesAll() && len(row.Disagreements) < 20 {
			row.Disagreements = append(row.Disagreements, fmt.Sprintf("%s turn %d on %s: predicted %d (+%d pending), cached %d of %d prompt tokens",
				r.Session, r.Turn, r.Replica, o.Predicted, o.Pending, o.Cached, o.Prompt))
		}
	}
	sort.Strings(row.Disagreements)
	for i := range after {
		row.EngineQueries += after[i].Queries - before[i].Queries
		row.EngineHits += after[i].Hits - before[i].Hits
	}
	if row.EngineQueries > 0 {
		row.EngineHitRatio = row.EngineHits / row.EngineQueries
	}
	row.TTFT = stats.Summarize(ttft)
	row.Agreement = Agree(WithPending(outcomes), blockSize)
	row.AgreementStored = Agree(outcomes, blockSize)
}

// agreesAll reports whether every request agreed.
func (a Agreement) agreesAll() bool { return a.Agrees == a.Requests }

// Markdown renders the report: the command, the machine, the table and the notes.
func (rep *Report) Markdown() string {
	var b strings.Builder
	b.WriteString("# Replica policies on two real vLLM engines\n\n")
	fmt.Fprintf(&b, "Command: `%s`\n\nMachine: %s.\n\n", rep.Command, rep.Machine)
	c := rep.Config
	fmt.Fprintf(&b, "Engines: 2 × vLLM (CPU, tiny-llama), one core each, %d KV blocks of %d tokens each (%d tokens), prefix caching on, KV events over ZeroMQ; started once in %s, prefix caches emptied (POST /reset_prefix_cache) before each run.\n\n",
		c.Engine.Blocks, c.Engine.BlockSize, c.Engine.Blocks*c.Engine.BlockSize, rep.EngineStartup)
	fmt.Fprintf(&b, "Trace: %d sessions at once × %d turns (%d requests), %d shared system prompts of %d words, user messages of %d words, answers of %d tokens (ignore_eos), seed %d; each turn resends the conversation with the previous answer and a new user message; streamed, with usage.\n\n",
		c.Trace.Sessions, c.Trace.Turns, c.Trace.Sessions*c.Trace.Turns, c.Trace.SystemPrompts, c.Trace.SystemWords, c.Trace.UserWords, c.MaxTokens, c.Trace.Seed)
	b.WriteString(rep.Table())
	b.WriteString("\n" + agreementNote)
	for _, r := range rep.Rows {
		if len(r.EventsReceived) > 0 {
			fmt.Fprintf(&b, "\n%s: KV events received %s (block_removed: the engines' evictions).\n", r.Key, floatCounts(r.EventsReceived))
		}
		if r.FirstError != "" {
			fmt.Fprintf(&b, "\n%s: %d of %d requests failed, first: %s\n", r.Key, r.Requests-r.OK, r.Requests, r.FirstError)
		}
		if len(r.Disagreements) > 0 {
			fmt.Fprintf(&b, "\n%s, requests whose prediction (stored + pending) disagreed (at most 20):\n\n", r.Key)
			for _, d := range r.Disagreements {
				fmt.Fprintf(&b, "- %s\n", d)
			}
		}
	}
	return b.String()
}

// agreementNote defines the agreement columns (see Agree).
const agreementNote = `Engine hit ratio: the delta of vllm:prefix_cache_hits_total over vllm:prefix_cache_queries_total (tokens), both engines summed, over the run. ` +
	"Prediction columns: what the gateway's policy counted the chosen replica as holding when it picked it, `x-router-predicted-cached-tokens` (the leading tokens its engine had reported stored by KV events) plus `x-router-pending-cached-tokens` (further blocks an earlier pick had just sent there, not yet confirmed), against the engine's `usage.prompt_tokens_details.cached_tokens`, over the requests that completed; " +
	"*hit* = both zero or both non-zero; *≤1 block* = they differ by at most one block (vLLM never serves a prompt's last token from the cache, so a fully cached prompt of whole blocks reports one block less than it holds); *agrees* = both; a request without the header agrees with nothing. " +
	"*Engine-reported alone: agrees* leaves the pending blocks out. The /tokenize mean is the time a request spent on the engine's `/tokenize` before its pick (uncached calls). " +
	"Runs without KV events have no prediction to compare (the guess is kept in 128-character blocks, not tokens).\n"

// Table is the report's table, one row per run.
func (rep *Report) Table() string {
	var b strings.Builder
	b.WriteString("| policy | KV events | ok / requests | engine hit ratio | TTFT p50 / p99 | prediction: hit | ≤1 block | agrees | exact | engine-reported alone: agrees | requests per replica | /tokenize mean | fallbacks |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rep.Rows {
		events, hit, within, agrees, exact, stored, tok := "no", "n/a", "n/a", "n/a", "n/a", "n/a", "—"
		if r.Events {
			a, as := r.Agreement, r.AgreementStored
			events = "yes"
			hit, within = pct(a.Rate(a.HitAgrees)), pct(a.Rate(a.WithinBlock))
			agrees, exact = pct(a.Rate(a.Agrees)), pct(a.Rate(a.Exact))
			stored = pct(as.Rate(as.Agrees))
			tok = report.Millis(r.TokenizeMeanMs)
		}
		name := r.Policy
		if r.Variant != "" {
			name += "-" + r.Variant
		}
		fmt.Fprintf(&b, "| %s | %s | %d / %d | %.1f%% | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			name, events, r.OK, r.Requests, 100*r.EngineHitRatio, report.P50P99(r.TTFT), hit, within, agrees, exact, stored,
			counts(r.PerReplica), tok, fallbacks(r))
	}
	return b.String()
}

func pct(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) }

func counts(m map[string]int) string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	parts := make([]string, len(ks))
	for i, k := range ks {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

func floatCounts(m map[string]float64) string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	parts := make([]string, len(ks))
	for i, k := range ks {
		parts[i] = fmt.Sprintf("%s %.0f", k, m[k])
	}
	return strings.Join(parts, ", ")
}

func fallbacks(r Row) string {
	if !r.Events {
		return "—"
	}
	return fmt.Sprintf("%.0f", r.Fallbacks)
}
