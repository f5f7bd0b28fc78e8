package sim

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"
)

// Config describes one simulated replica. The zero value is not valid; start
// from DefaultConfig, FastPreset or SlowPreset and change fields.
//
// Latency of one request, with f a per-request factor drawn uniformly from
// [1-Jitter, 1+Jitter]:
//
//	time to first token = queueing + f*(TTFTBase + PrefillPerToken*uncached prompt tokens)
//	each later token    = f*DecodePerToken
//
// so a request with n output tokens ends f*(n-1)*DecodePerToken after its
// first token. Server.SetSlowdown multiplies every delay computed after it
// by a further factor, to degrade a replica at runtime.
type Config struct {
	// Name identifies the replica in the x-mockllm-replica header and logs.
	Name string `yaml:"name"`
	// Model is the model id listed by /v1/models, used in the model_name
	// metric label and echoed when a request names no model.
	Model string `yaml:"model"`

	// MaxRunning is the number of batch slots: requests that are prefilling
	// or decoding at once.
	MaxRunning int `yaml:"max_running"`
	// MaxWaiting bounds the FIFO queue in front of the slots. A request that
	// finds it full is answered 429 with Retry-After at once. 0 means no
	// queue: every request beyond MaxRunning is refused.
	MaxWaiting int `yaml:"max_waiting"`

	// TTFTBase is the fixed part of the time to first token.
	TTFTBase time.Duration `yaml:"ttft_base"`
	// PrefillPerToken is the prefill cost of each prompt token that is not
	// in the prefix cache.
	PrefillPerToken time.Duration `yaml:"prefill_per_token"`
	// DecodePerToken is the time between two output tokens.
	DecodePerToken time.Duration `yaml:"decode_per_token"`
	// Jitter is the half-width of the per-request speed factor, in [0, 1]:
	// 0.5 makes a request between 0.5x and 1.5x the nominal latency.
	Jitter float64 `yaml:"jitter"`
	// PrefillInterference is how much each prefill running on the replica
	// slows its decoding requests down: a decode step takes
	// DecodePerToken × (1 + PrefillInterference × prefills running when the
	// step starts), as a prefill's compute stalls the batch it shares (what
	// prefill/decode disaggregation removes). 0 (the default): none. >= 0.
	PrefillInterference float64 `yaml:"prefill_interference"`

	// DefaultMaxTokens is the output length when a request sets neither
	// max_tokens nor max_completion_tokens.
	DefaultMaxTokens int `yaml:"default_max_tokens"`
	// MaxOutputTokens caps the output length; a request asking for more gets
	// this many tokens and finish_reason "length".
	MaxOutputTokens int `yaml:"max_output_tokens"`

	// BlockChars is the prefix-cache block size in prompt bytes (4 bytes
	// count as one token, so 64 bytes is a 16-token block).
	BlockChars int `yaml:"block_chars"`
	// KVCacheBlocks is the capacity of the simulated KV cache in blocks: the
	// size of the prefix-cache LRU and the denominator of
	// vllm:kv_cache_usage_perc. 0 disables prefix caching.
	KVCacheBlocks int `yaml:"kv_cache_blocks"`

	// KVEventsEndpoint, when set, publishes the prefix cache's changes as
	// vLLM's KV-cache events (BlockStored, BlockRemoved, AllBlocksCleared)
	// on a ZMQ PUB socket bound there, topic "kv-events":
	// tcp://127.0.0.1:5557, or port 0 for a free one (ListenLocal gives
	// each replica its own: a fixed port is offset by the replica's index,
	// as vLLM offsets it by data-parallel rank). BlockChars must then be a
	// multiple of 4, so a block is whole tokens. Empty: no events.
	KVEventsEndpoint string `yaml:"kv_events_endpoint"`

	// ErrorRate is the fraction of requests answered 500 before queueing.
	ErrorRate float64 `yaml:"error_rate"`
	// StallFirstByte delays every request this long before anything is read
	// or written.
	StallFirstByte time.Duration `yaml:"stall_first_byte"`
	// CloseMidStreamRate is the fraction of streaming requests whose
	// connection is cut after CloseAfterChunks token chunks, before [DONE].
	CloseMidStreamRate float64 `yaml:"close_mid_stream_rate"`
	// CloseAfterChunks is how many token chunks a cut stream delivers first
	// (fewer if the answer is shorter).
	CloseAfterChunks int `yaml:"close_after_chunks"`

	// Seed seeds the random source for jitter and fault injection. Requests
	// arriving in the same order draw the same numbers.
	Seed uint64 `yaml:"seed"`

	// Role is the replica's side of vLLM's prefill/decode KV hand-off (see
	// disagg.go): "prefill" answers a non-streaming request with
	// kv_transfer_params.do_remote_decode with transfer parameters, "decode"
	// decodes from such parameters without prefilling, "both" does either.
	// Empty (the default): no KV connector, kv_transfer_params is ignored.
	Role string `yaml:"role"`
	// KVLease is how long a prefill replica keeps blocks for a remote decode;
	// a decode with older parameters answers the wrong text, as vLLM's does.
	// Default 30s.
	KVLease time.Duration `yaml:"kv_lease"`
}

// DefaultConfig returns FastPreset.
func DefaultConfig() Config { return FastPreset() }

// FastPreset is a small, cheap model: about 50 ms end to end for a
// 32-token answer to a short prompt.
func FastPreset() Config {
	return Config{
		Name:             "mockllm-fast",
		Model:            "mock-fast",
		MaxRunning:       32,
		MaxWaiting:       256,
		TTFTBase:         5 * time.Millisecond,
		PrefillPerToken:  100 * time.Microsecond,
		DecodePerToken:   1500 * time.Microsecond,
		Jitter:           0.2,
		DefaultMaxTokens: 32,
		MaxOutputTokens:  4096,
		BlockChars:       64,
		KVCacheBlocks:    4096,
		CloseAfterChunks: 2,
		Seed:             1,
		KVLease:          30 * time.Second,
	}
}

// SlowPreset is a large model: 20–60 ms per output token, so a 50-token
// answer takes 1–3 s, like the uniform 1–3 s slow path of the original Triage
// design's Python prototype (docs/sources.md).
func SlowPreset() Config {
	c := FastPreset()
	c.Name = "mockllm-slow"
	c.Model = "mock-slow"
	c.MaxRunning = 8
	c.TTFTBase = 50 * time.Millisecond
	c.PrefillPerToken = 500 * time.Microsecond
	c.DecodePerToken = 40 * time.Millisecond
	c.Jitter = 0.5
	c.KVCacheBlocks = 512
	return c
}

// PrefillDelay is the model's prefill time for a prompt of promptTokens
// tokens of which cachedTokens are in the prefix cache, at nominal speed
// (no jitter): TTFTBase + PrefillPerToken*(promptTokens-cachedTokens).
func (c Config) PrefillDelay(promptTokens, cachedTokens int) time.Duration {
	return c.TTFTBase + c.PrefillPerToken*time.Duration(max(0, promptTokens-cachedTokens))
}

// Preset returns the preset called name ("fast" or "slow").
func Preset(name string) (Config, error) {
	switch name {
	case "fast":
		return FastPreset(), nil
	case "slow":
		return SlowPreset(), nil
	}
	return Config{}, fmt.Errorf("unknown preset %q (want fast or slow)", name)
}

// Validate is ValidateAt("sim").
func (c Config) Validate() error { return c.ValidateAt("sim") }

// ValidateAt reports every invalid field, each error naming it from path
// ("sim.decode_per_token: must be >= 0").
func (c Config) ValidateAt(path string) error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s.%s: "+format, append([]any{path, field}, args...)...))
	}
	if strings.TrimSpace(c.Name) == "" {
		bad("name", "must not be empty")
	}
	if strings.TrimSpace(c.Model) == "" {
		bad("model", "must not be empty")
	}
	if c.MaxRunning < 1 {
		bad("max_running", "must be >= 1, got %d", c.MaxRunning)
	}
	if c.MaxWaiting < 0 {
		bad("max_waiting", "must be >= 0, got %d", c.MaxWaiting)
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{
		{"ttft_base", c.TTFTBase},
		{"prefill_per_token", c.PrefillPerToken},
		{"decode_per_token", c.DecodePerToken},
		{"stall_first_byte", c.StallFirstByte},
	} {
		if d.v < 0 {
			bad(d.field, "must be >= 0, got %s", d.v)
		}
	}
	for _, r := range []struct {
		field string
		v     float64
	}{
		{"jitter", c.Jitter},
		{"error_rate", c.ErrorRate},
		{"close_mid_stream_rate", c.CloseMidStreamRate},
	} {
		if !(r.v >= 0 && r.v <= 1) { // also rejects NaN
			bad(r.field, "must be in [0, 1], got %v", r.v)
		}
	}
	if c.DefaultMaxTokens < 1 {
		bad("default_max_tokens", "must be >= 1, got %d", c.DefaultMaxTokens)
	}
	if c.MaxOutputTokens < 1 {
		bad("max_output_tokens", "must be >= 1, got %d", c.MaxOutputTokens)
	} else if c.DefaultMaxTokens > c.MaxOutputTokens {
		bad("default_max_tokens", "must be <= max_output_tokens (%d), got %d", c.MaxOutputTokens, c.DefaultMaxTokens)
	}
	if c.BlockChars < 1 {
		bad("block_chars", "must be >= 1, got %d", c.BlockChars)
	}
	if c.KVEventsEndpoint != "" {
		if !strings.HasPrefix(c.KVEventsEndpoint, "tcp://") {
			bad("kv_events_endpoint", "must be tcp://host:port, got %q", c.KVEventsEndpoint)
		}
		if c.BlockChars%4 != 0 {
			bad("block_chars", "must be a multiple of 4 (whole tokens) when kv_events_endpoint is set, got %d", c.BlockChars)
		}
	}
	if c.KVCacheBlocks < 0 {
		bad("kv_cache_blocks", "must be >= 0, got %d", c.KVCacheBlocks)
	}
	if c.CloseAfterChunks < 0 {
		bad("close_after_chunks", "must be >= 0, got %d", c.CloseAfterChunks)
	}
	errs = append(errs, c.validateRole(path))
	return errors.Join(errs...)
}

// BindFlags registers one flag per field on fs, named after the YAML key in
// kebab-case (max_running → --max-running), with c's current values as
// defaults. Parsing fs writes into c.
func (c *Config) BindFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Name, "name", c.Name, "replica name, sent in the x-mockllm-replica header")
	fs.StringVar(&c.Model, "model", c.Model, "model id listed by /v1/models and used when a request names none")
	fs.IntVar(&c.MaxRunning, "max-running", c.MaxRunning, "batch slots: requests prefilling or decoding at once")
	fs.IntVar(&c.MaxWaiting, "max-waiting", c.MaxWaiting, "FIFO queue bound in front of the slots; beyond it requests get 429 (0: no queue)")
	fs.DurationVar(&c.TTFTBase, "ttft-base", c.TTFTBase, "fixed part of the time to first token")
	fs.DurationVar(&c.PrefillPerToken, "prefill-per-token", c.PrefillPerToken, "prefill time per prompt token not in the prefix cache")
	fs.DurationVar(&c.DecodePerToken, "decode-per-token", c.DecodePerToken, "time between two output tokens")
	fs.Float64Var(&c.Jitter, "jitter", c.Jitter, "per-request latency factor drawn from [1-jitter, 1+jitter]")
	fs.Float64Var(&c.PrefillInterference, "prefill-interference", c.PrefillInterference, "decode slowdown per prefill running on the replica (0: none)")
	fs.IntVar(&c.DefaultMaxTokens, "default-max-tokens", c.DefaultMaxTokens, "output tokens when the request sets no max_tokens")
	fs.IntVar(&c.MaxOutputTokens, "max-output-tokens", c.MaxOutputTokens, "cap on output tokens per request")
	fs.IntVar(&c.BlockChars, "block-chars", c.BlockChars, "prefix-cache block size in prompt bytes (4 bytes = 1 token)")
	fs.IntVar(&c.KVCacheBlocks, "kv-cache-blocks", c.KVCacheBlocks, "simulated KV cache capacity in blocks (0: no prefix caching)")
	fs.StringVar(&c.KVEventsEndpoint, "kv-events-endpoint", c.KVEventsEndpoint, "publish KV-cache events (vLLM's format) on a ZMQ PUB socket bound here, e.g. tcp://127.0.0.1:5557 (empty: none)")
	fs.Float64Var(&c.ErrorRate, "error-rate", c.ErrorRate, "fraction of requests answered 500")
	fs.DurationVar(&c.StallFirstByte, "stall-first-byte", c.StallFirstByte, "delay before any byte of every request is read or written")
	fs.Float64Var(&c.CloseMidStreamRate, "close-mid-stream-rate", c.CloseMidStreamRate, "fraction of streaming requests whose connection is cut before [DONE]")
	fs.IntVar(&c.CloseAfterChunks, "close-after-chunks", c.CloseAfterChunks, "token chunks a cut stream delivers before the cut")
	fs.Uint64Var(&c.Seed, "seed", c.Seed, "seed of the random source for jitter and faults")
	fs.StringVar(&c.Role, "role", c.Role, "side of the prefill/decode KV hand-off: prefill, decode, both, or empty for none")
	fs.DurationVar(&c.KVLease, "kv-lease", c.KVLease, "how long a prefill replica keeps blocks for a remote decode")
}
