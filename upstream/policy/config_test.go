package policy

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

func TestDefaultConfigIsValid(t *testing.T) {
	require.NoError(t, DefaultConfig().ValidateAt("policy"))
}

// update changes section key of c through f, as a caller outside the
// package does with SectionOf and SetSection.
func update[C Section](c *Config, key string, f func(*C)) {
	s := SectionOf[C](*c, key)
	f(&s)
	if err := c.SetSection(key, s); err != nil {
		panic(err)
	}
}

func setScorers(c *Config, w map[string]float64) {
	update(c, "weighted", func(s *WeightedConfig) { s.Scorers = w })
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
		{"imbalance count", func(c *Config) { update(c, "prefix_cache", func(s *PrefixCacheConfig) { s.ImbalanceCount = 0 }) },
			[]string{"policy.prefix_cache.imbalance_count: must be >= 1, got 0"}},
		{"block chars and index", func(c *Config) {
			update(c, "prefix_cache", func(s *PrefixCacheConfig) { s.BlockChars = 0; s.IndexBlocks = -1 })
		},
			[]string{"policy.prefix_cache.block_chars: must be >= 1, got 0", "policy.prefix_cache.index_blocks"}},
		{"load factor", func(c *Config) { update(c, "prefix_cache", func(s *PrefixCacheConfig) { s.LoadFactor = -1 }) },
			[]string{"policy.prefix_cache.load_factor"}},
		{"lmetric variant", func(c *Config) { update(c, "lmetric", func(s *LMetricConfig) { s.Variant = "sticky-ish" }) },
			[]string{`policy.lmetric.variant: must be "", "sticky" or "unified", got "sticky-ish"`}},
		{"lmetric ratios", func(c *Config) {
			update(c, "lmetric", func(s *LMetricConfig) { s.AffinityMinHitRatio = 1.5; s.OverloadFactor = 0 })
		},
			[]string{"policy.lmetric.affinity_min_hit_ratio", "policy.lmetric.overload_factor"}},
		{"lmetric sessions", func(c *Config) { update(c, "lmetric", func(s *LMetricConfig) { s.MaxSessions = 0 }) },
			[]string{"policy.lmetric.max_sessions"}},
		{"weighted unknown scorer", func(c *Config) { setScorers(c, map[string]float64{"latency": 1, "queue-depth": 1}) },
			[]string{"policy.weighted.scorers.latency: unknown scorer"}},
		{"weighted negative weight", func(c *Config) { setScorers(c, map[string]float64{"queue-depth": -1, "kv-utilization": 1}) },
			[]string{"policy.weighted.scorers.queue-depth: weight must be a finite number >= 0, got -1"}},
		{"weighted all zero", func(c *Config) { setScorers(c, map[string]float64{"queue-depth": 0}) },
			[]string{"policy.weighted.scorers: need at least one scorer with weight > 0"}},
		{"weighted empty map", func(c *Config) { setScorers(c, map[string]float64{}) },
			[]string{"policy.weighted.scorers: need at least one scorer with weight > 0"}},
		{"vtc fields", func(c *Config) {
			update(c, "vtc", func(s *VTCConfig) {
				s.Window = 0
				s.OutputTokenWeight = -2
				s.MaxTokens = 10
				s.MaxReplicaLoad = 0
			})
		}, []string{"policy.vtc.window", "policy.vtc.output_token_weight", "policy.vtc.max_tokens", "policy.vtc.max_replica_load"}},
		{"trace", func(c *Config) { c.Trace.TopK = 0; c.Trace.Capacity = 0 },
			[]string{"policy.trace.top_k", "policy.trace.capacity"}},
		{"every error at once", func(c *Config) {
			c.Name = "x"
			update(c, "prefix_cache", func(s *PrefixCacheConfig) { s.ImbalanceCount = 0 })
			update(c, "lmetric", func(s *LMetricConfig) { s.BlockChars = 0 })
			update(c, "vtc", func(s *VTCConfig) { s.MinTokens = 0 })
		}, []string{"policy.name", "policy.lmetric.block_chars", "policy.prefix_cache.imbalance_count", "policy.vtc.min_tokens"}}, // sections in key order
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tt.mutate(&cfg)
			err := cfg.ValidateAt("policy")
			require.Error(t, err)
			lines := strings.Split(err.Error(), "\n")
			require.Len(t, lines, len(tt.want), "errors: %v", err)
			for i, w := range tt.want {
				require.Contains(t, lines[i], w)
			}
			_, err = New(cfg, Env{})
			require.Error(t, err)
		})
	}
}

func TestConfigValidateAt(t *testing.T) {
	cfg := DefaultConfig()
	update(&cfg, "prefix_cache", func(s *PrefixCacheConfig) { s.ImbalanceCount = 0 })
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
	require.NoError(t, cfg.ValidateAt("policy"))
	vtc := SectionOf[VTCConfig](cfg, "vtc")
	require.Equal(t, 30*time.Second, vtc.Window)
	require.Equal(t, 2.0, vtc.FairnessWeight)
	require.Equal(t, 2.0, vtc.OutputTokenWeight, "omitted fields keep defaults")
	require.Equal(t, map[string]float64{"load-balance": 1}, SectionOf[WeightedConfig](cfg, "weighted").Scorers, "scorers replace the defaults, not merge")

	cfg = DefaultConfig()
	dec = yaml.NewDecoder(strings.NewReader("prefix_cache:\n  imbalance: 3\n"))
	dec.KnownFields(true)
	require.ErrorContains(t, dec.Decode(&cfg), "field imbalance not found")
}

func TestConfigSections(t *testing.T) {
	var zero Config
	require.Equal(t, []string{"least_busy_time", "least_latency", "least_utilization", "lmetric", "preble", "prefix_cache", "random", "slo", "throughput", "vtc", "weighted"}, zero.SectionKeys())
	for _, key := range zero.SectionKeys() {
		require.Equal(t, DefaultConfig().Section(key), zero.Section(key), "a zero Config reads %s as its defaults", key)
	}
	require.Nil(t, zero.Section("nope"))
	require.Panics(t, func() { SectionOf[LMetricConfig](zero, "vtc") })
	require.Panics(t, func() { SectionOf[LMetricConfig](zero, "nope") })

	cfg := DefaultConfig()
	require.ErrorContains(t, cfg.SetSection("nope", RandomConfig{}), `policy: no section "nope" (want one of least_busy_time, least_latency, least_utilization, lmetric, preble, prefix_cache, random, slo, throughput, vtc, weighted)`)
	require.EqualError(t, cfg.SetSection("random", LMetricConfig{}), `policy: section "random" takes a policy.RandomConfig, got policy.LMetricConfig`)
	require.EqualError(t, cfg.SetSection("random", &RandomConfig{}), `policy: section "random" takes a policy.RandomConfig, got *policy.RandomConfig`)
	require.Equal(t, DefaultConfig(), cfg, "a refused SetSection changes nothing")

	require.NoError(t, cfg.SetSection("random", RandomConfig{Seed: 9}))
	require.Equal(t, uint64(9), SectionOf[RandomConfig](cfg, "random").Seed)
	require.NoError(t, zero.SetSection("random", RandomConfig{Seed: 9}))
	require.Equal(t, DefaultConfig().Section("vtc"), zero.Section("vtc"), "setting one section keeps the others")
}

func TestConfigIsAValue(t *testing.T) {
	orig := DefaultConfig()
	cp := orig
	update(&cp, "prefix_cache", func(s *PrefixCacheConfig) { s.BlockChars = 1 })
	setScorers(&cp, map[string]float64{"load-balance": 1})
	require.Equal(t, DefaultConfig(), orig, "changing a copy leaves the original alone")

	// Maps inside sections cross the boundary as copies, both ways.
	w := SectionOf[WeightedConfig](orig, "weighted")
	w.Scorers["load-balance"] = 5
	require.Equal(t, DefaultScorerWeights(), SectionOf[WeightedConfig](orig, "weighted").Scorers, "what Section returns is a copy")
	mine := map[string]float64{"queue-depth": 1}
	setScorers(&orig, mine)
	mine["queue-depth"] = 7
	require.Equal(t, map[string]float64{"queue-depth": 1}, SectionOf[WeightedConfig](orig, "weighted").Scorers, "what SetSection keeps is a copy")

	// Decoding into a copy writes into neither the original's map of
	// sections nor a map inside one.
	base := DefaultConfig()
	dup := base
	require.NoError(t, decodeInto(&dup, "weighted: {scorers: {kv-utilization: 1}}\nvtc: {window: 2s}\n"))
	require.Equal(t, DefaultConfig(), base)
}
