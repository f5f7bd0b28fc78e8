package sim

import (
	"flag"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPresetsAreValid(t *testing.T) {
	for _, name := range []string{"fast", "slow"} {
		c, err := Preset(name)
		require.NoError(t, err)
		require.NoError(t, c.Validate(), name)
	}
	require.NoError(t, DefaultConfig().Validate())
	_, err := Preset("medium")
	require.ErrorContains(t, err, `unknown preset "medium"`)
}

func TestSlowPresetTakesOneToThreeSecondsFor50Tokens(t *testing.T) {
	c := SlowPreset()
	decode := func(f float64) time.Duration { return scale(c.DecodePerToken*50, f) }
	assert.Equal(t, time.Second, decode(1-c.Jitter))
	assert.Equal(t, 3*time.Second, decode(1+c.Jitter))
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		field  string
		mutate func(*Config)
		want   string
	}{
		{"name", func(c *Config) { c.Name = " " }, "sim.name: must not be empty"},
		{"model", func(c *Config) { c.Model = "" }, "sim.model: must not be empty"},
		{"max_running", func(c *Config) { c.MaxRunning = 0 }, "sim.max_running: must be >= 1, got 0"},
		{"max_waiting", func(c *Config) { c.MaxWaiting = -1 }, "sim.max_waiting: must be >= 0, got -1"},
		{"ttft_base", func(c *Config) { c.TTFTBase = -1 }, "sim.ttft_base: must be >= 0, got -1ns"},
		{"prefill_per_token", func(c *Config) { c.PrefillPerToken = -time.Millisecond }, "sim.prefill_per_token: must be >= 0"},
		{"decode_per_token", func(c *Config) { c.DecodePerToken = -time.Millisecond }, "sim.decode_per_token: must be >= 0"},
		{"stall_first_byte", func(c *Config) { c.StallFirstByte = -time.Second }, "sim.stall_first_byte: must be >= 0"},
		{"jitter", func(c *Config) { c.Jitter = 1.5 }, "sim.jitter: must be in [0, 1], got 1.5"},
		{"error_rate NaN", func(c *Config) { c.ErrorRate = math.NaN() }, "sim.error_rate: must be in [0, 1], got NaN"},
		{"close_mid_stream_rate", func(c *Config) { c.CloseMidStreamRate = -0.1 }, "sim.close_mid_stream_rate: must be in [0, 1]"},
		{"default_max_tokens", func(c *Config) { c.DefaultMaxTokens = 0 }, "sim.default_max_tokens: must be >= 1"},
		{"default above cap", func(c *Config) { c.DefaultMaxTokens = 10; c.MaxOutputTokens = 5 }, "sim.default_max_tokens: must be <= max_output_tokens (5), got 10"},
		{"max_output_tokens", func(c *Config) { c.MaxOutputTokens = 0 }, "sim.max_output_tokens: must be >= 1"},
		{"block_chars", func(c *Config) { c.BlockChars = 0 }, "sim.block_chars: must be >= 1"},
		{"kv_cache_blocks", func(c *Config) { c.KVCacheBlocks = -1 }, "sim.kv_cache_blocks: must be >= 0"},
		{"close_after_chunks", func(c *Config) { c.CloseAfterChunks = -1 }, "sim.close_after_chunks: must be >= 0"},
		{"role", func(c *Config) { c.Role = "producer" }, `sim.role: must be empty (no KV connector), prefill, decode or both, got "producer"`},
		{"kv_lease", func(c *Config) { c.KVLease = 0 }, "sim.kv_lease: must be > 0, got 0s"},
		{"prefill_interference", func(c *Config) { c.PrefillInterference = -1 }, "sim.prefill_interference: must be a finite number >= 0, got -1"},
	} {
		t.Run(tc.field, func(t *testing.T) {
			c := DefaultConfig()
			tc.mutate(&c)
			require.ErrorContains(t, c.Validate(), tc.want)
			_, err := New(c, Options{})
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestValidateReportsEveryError(t *testing.T) {
	c := DefaultConfig()
	c.MaxRunning, c.DecodePerToken, c.ErrorRate = 0, -1, 2
	err := c.Validate()
	require.Error(t, err)
	lines := strings.Split(err.Error(), "\n")
	assert.Equal(t, []string{
		"sim.max_running: must be >= 1, got 0",
		"sim.decode_per_token: must be >= 0, got -1ns",
		"sim.error_rate: must be in [0, 1], got 2",
	}, lines)
}

func TestBindFlags(t *testing.T) {
	c := SlowPreset()
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	c.BindFlags(fs)
	require.NoError(t, fs.Parse([]string{"--decode-per-token", "5ms", "--max-running=3", "--error-rate", "0.25", "--seed", "9"}))
	want := SlowPreset()
	want.DecodePerToken, want.MaxRunning, want.ErrorRate, want.Seed = 5*time.Millisecond, 3, 0.25, 9
	assert.Equal(t, want, c)

	// One flag per YAML key.
	var flags []string
	fs.VisitAll(func(f *flag.Flag) { flags = append(flags, strings.ReplaceAll(f.Name, "-", "_")) })
	assert.Len(t, flags, 21)
	for _, f := range flags {
		assert.Contains(t, yamlKeys(), f)
	}
}

func yamlKeys() []string {
	return []string{"name", "model", "max_running", "max_waiting", "ttft_base", "prefill_per_token",
		"decode_per_token", "jitter", "default_max_tokens", "max_output_tokens", "block_chars",
		"kv_cache_blocks", "kv_events_endpoint", "error_rate", "stall_first_byte", "close_mid_stream_rate",
		"close_after_chunks", "seed", "role", "kv_lease", "prefill_interference"}
}
