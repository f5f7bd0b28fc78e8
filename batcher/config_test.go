package batcher

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*Config)
		want   []string // substrings that must all appear; nil means valid
	}{
		{"defaults", func(*Config) {}, nil},
		{"batch of one", func(c *Config) { c.MaxBatch, c.QueueSize = 1, 1 }, nil},
		{"max batch zero", func(c *Config) { c.MaxBatch = 0 }, []string{"batcher.max_batch: must be in [1, 1024], got 0"}},
		{"max batch too big", func(c *Config) { c.MaxBatch, c.QueueSize = 2048, 4096 }, []string{"batcher.max_batch"}},
		{"max wait zero", func(c *Config) { c.MaxWait = 0 }, []string{"batcher.max_wait: must be in (0s, 10s], got 0s"}},
		{"max wait too long", func(c *Config) { c.MaxWait = time.Minute }, []string{"batcher.max_wait"}},
		{"queue zero", func(c *Config) { c.QueueSize = 0 }, []string{"batcher.queue_size: must be in [1, 1048576], got 0"}},
		{"queue below batch", func(c *Config) { c.QueueSize = 8 }, []string{"batcher.queue_size: must be >= max_batch (32), got 8"}},
		{"workers zero", func(c *Config) { c.Workers = 0 }, []string{"batcher.workers: must be in [1, 64], got 0"}},
		{"zero value reports every field", func(c *Config) { *c = Config{} }, []string{
			"batcher.max_batch", "batcher.max_wait", "batcher.queue_size", "batcher.workers",
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
			_, nerr := New(cfg, func(ctx context.Context, texts []string) ([]int, error) { return nil, nil }, Options{})
			require.Error(t, nerr, "New must refuse an invalid config")
		})
	}
}
