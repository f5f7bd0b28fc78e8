package decision

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDefaultConfigValid(t *testing.T) {
	require.NoError(t, DefaultConfig().Validate())
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*Config)
		want   []string // substrings that must all appear; nil means valid
	}{
		{"grey-zone policy", func(c *Config) { c.Policy = PolicyGreyZone }, nil},
		{"base+alpha exactly 1", func(c *Config) { c.Base, c.Alpha = 0.55, 0.45 }, nil},
		{"alpha zero", func(c *Config) { c.Alpha = 0 }, nil},
		{"unknown policy", func(c *Config) { c.Policy = "greyzone" }, []string{`decision.policy: must be "quadratic" or "grey-zone", got "greyzone"`}},
		{"empty policy", func(c *Config) { c.Policy = "" }, []string{"decision.policy"}},
		{"base zero", func(c *Config) { c.Base = 0 }, []string{"decision.base: must be in (0, 1), got 0"}},
		{"base one", func(c *Config) { c.Base, c.Alpha = 1, 0 }, []string{"decision.base"}},
		{"base NaN", func(c *Config) { c.Base = math.NaN() }, []string{"decision.base"}},
		{"alpha negative", func(c *Config) { c.Alpha = -0.1 }, []string{"decision.alpha: must be >= 0, got -0.1"}},
		{"base+alpha above 1", func(c *Config) { c.Base, c.Alpha = 0.6, 0.45 }, []string{"decision.alpha: base+alpha must be <= 1"}},
		{"slow concurrency zero", func(c *Config) { c.MaxSlowConcurrency = 0 }, []string{"decision.max_slow_concurrency: must be >= 1, got 0"}},
		{"grey low out of range", func(c *Config) { c.GreyLow = -0.1 }, []string{"decision.grey_low: must be in [0, 1]"}},
		{"grey high out of range", func(c *Config) { c.GreyHigh = 1.5 }, []string{"decision.grey_high: must be in [0, 1], got 1.5"}},
		{"grey high below low", func(c *Config) { c.GreyHigh = 0.4 }, []string{"decision.grey_high: must be > grey_low"}},
		{"grey zone empty", func(c *Config) { c.GreyLow, c.GreyHigh = 0.5, 0.5 }, []string{"decision.grey_high: must be > grey_low"}},
		{"low queue negative", func(c *Config) { c.LowQueue = -1 }, []string{"decision.low_queue"}},
		{"high queue below low", func(c *Config) { c.HighQueue, c.LowQueue = 2, 5 }, []string{"decision.high_queue: must be >= low_queue (5), got 2"}},
		{"every error reported", func(c *Config) { c.Policy = "x"; c.Base = 0; c.MaxSlowConcurrency = -3; c.LowQueue = -1 }, []string{
			"decision.policy", "decision.base", "decision.max_slow_concurrency", "decision.low_queue",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tt.modify(&cfg)
			err := cfg.Validate()
			if tt.want == nil {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			for _, w := range tt.want {
				require.Contains(t, err.Error(), w)
			}
			_, perr := NewPolicy(cfg)
			require.Error(t, perr, "NewPolicy must refuse an invalid config")
		})
	}
}
