package policy

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

func TestDefaultConfigIsValid(t *testing.T) {
	require.NoError(t, DefaultConfig().Validate())
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Config)
		want   []string // substrings, one per expected error
	}{
		{"unknown name", func(c *Config) { c.Name = "fastest" },
			[]string{`policy.name: unknown policy "fastest"`}},
		{"empty name", func(c *Config) { c.Name = "" },
			[]string{`policy.name: unknown policy ""`}},
		{"imbalance count", func(c *Config) { c.PrefixCache.ImbalanceCount = 0 },
			[]string{"policy.prefix_cache.imbalance_count: must be >= 1, got 0"}},
		{"block chars and index", func(c *Config) { c.PrefixCache.BlockChars = 0; c.PrefixCache.IndexBlocks = -1 },
			[]string{"policy.prefix_cache.block_chars: must be >= 1, got 0", "policy.prefix_cache.index_blocks"}},
		{"load factor", func(c *Config) { c.PrefixCache.LoadFactor = -1 },
			[]string{"policy.prefix_cache.load_factor"}},
		{"lmetric variant", func(c *Config) { c.LMetric.Variant = "sticky-ish" },
			[]string{`policy.lmetric.variant: must be "", "sticky" or "unified", got "sticky-ish"`}},
		{"lmetric ratios", func(c *Config) { c.LMetric.AffinityMinHitRatio = 1.5; c.LMetric.OverloadFactor = 0 },
			[]string{"policy.lmetric.affinity_min_hit_ratio", "policy.lmetric.overload_factor"}},
		{"lmetric sessions", func(c *Config) { c.LMetric.MaxSessions = 0 },
			[]string{"policy.lmetric.max_sessions"}},
		{"weighted unknown scorer", func(c *Config) { c.Weighted.Scorers = map[string]float64{"latency": 1, "queue-depth": 1} },
			[]string{"policy.weighted.scorers.latency: unknown scorer"}},
		{"weighted negative weight", func(c *Config) { c.Weighted.Scorers = map[string]float64{"queue-depth": -1, "kv-utilization": 1} },
			[]string{"policy.weighted.scorers.queue-depth: weight must be a finite number >= 0, got -1"}},
		{"weighted all zero", func(c *Config) { c.Weighted.Scorers = map[string]float64{"queue-depth": 0} },
			[]string{"policy.weighted.scorers: need at least one scorer with weight > 0"}},
		{"weighted empty map", func(c *Config) { c.Weighted.Scorers = map[string]float64{} },
			[]string{"policy.weighted.scorers: need at least one scorer with weight > 0"}},
		{"vtc fields", func(c *Config) {
			c.VTC.Window = 0
			c.VTC.OutputTokenWeight = -2
			c.VTC.MaxTokens = 10
			c.VTC.MaxReplicaLoad = 0
		}, []string{"policy.vtc.window", "policy.vtc.output_token_weight", "policy.vtc.max_tokens", "policy.vtc.max_replica_load"}},
		{"trace", func(c *Config) { c.Trace.TopK = 0; c.Trace.Capacity = 0 },
			[]string{"policy.trace.top_k", "policy.trace.capacity"}},
		{"every error at once", func(c *Config) {
			c.Name = "x"
			c.PrefixCache.ImbalanceCount = 0
			c.LMetric.BlockChars = 0
			c.VTC.MinTokens = 0
		}, []string{"policy.name", "policy.prefix_cache.imbalance_count", "policy.lmetric.block_chars", "policy.vtc.min_tokens"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tt.mutate(&cfg)
			err := cfg.Validate()
			require.Error(t, err)
			lines := strings.Split(err.Error(), "\n")
			require.Len(t, lines, len(tt.want), "errors: %v", err)
			for i, w := range tt.want {
				require.Contains(t, lines[i], w)
			}
			_, err = New(cfg)
			require.Error(t, err)
		})
	}
}

func TestConfigValidateAt(t *testing.T) {
	cfg := DefaultConfig()
	cfg.PrefixCache.ImbalanceCount = 0
	require.EqualError(t, cfg.ValidateAt("pools.slow.policy"),
		"pools.slow.policy.prefix_cache.imbalance_count: must be >= 1, got 0")
}

func TestConfigFromYAML(t *testing.T) {
	cfg := DefaultConfig()
	dec := yaml.NewDecoder(strings.NewReader(`
name: vtc-basic
vtc:
  window: 30s
  fairness_weight: 2
weighted:
  scorers: {load-balance: 1}
`))
	dec.KnownFields(true)
	require.NoError(t, dec.Decode(&cfg))
	require.NoError(t, cfg.Validate())
	require.Equal(t, 30*time.Second, cfg.VTC.Window)
	require.Equal(t, 2.0, cfg.VTC.FairnessWeight)
	require.Equal(t, 2.0, cfg.VTC.OutputTokenWeight, "omitted fields keep defaults")
	require.Equal(t, map[string]float64{"load-balance": 1}, cfg.Weighted.Scorers, "scorers replace the defaults, not merge")

	cfg = DefaultConfig()
	dec = yaml.NewDecoder(strings.NewReader("prefix_cache:\n  imbalance: 3\n"))
	dec.KnownFields(true)
	require.ErrorContains(t, dec.Decode(&cfg), "field imbalance not found")
}
