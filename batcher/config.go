package batcher

import (
	"errors"
	"fmt"
	"time"
)

// Config tunes the batcher. Start from DefaultConfig; zero values are invalid, not defaults.
type Config struct {
	// MaxBatch is the most texts handed to one Func call, in [1, 1024]. Default 32.
	MaxBatch int `yaml:"max_batch"`
	// MaxWait is how long the oldest queued text may wait for a batch to fill while another batch
	// is running and a worker is free, in (0s, 10s]. It never delays a text when no batch is
	// running, so with Workers = 1 it has no effect. Default 50ms.
	MaxWait time.Duration `yaml:"max_wait"`
	// QueueSize bounds the distinct texts waiting for a batch, in [MaxBatch, 1048576]; past it
	// Submit fails fast with ErrQueueFull. Default 1024.
	QueueSize int `yaml:"queue_size"`
	// Workers is the number of batches that may run at once, in [1, 64]. Default 1.
	Workers int `yaml:"workers"`
	// MaxQueueDelay bounds how long a new text may expect to wait: Submit fails fast with
	// ErrQueueFull when the texts already queued, at the recent inference time per text, would
	// take longer than this, in [0s, 1m]; 0 disables the check. Default 1s.
	MaxQueueDelay time.Duration `yaml:"max_queue_delay"`
}

// DefaultConfig returns batches of at most 32 texts, a 50ms window, 1024 queued texts, one
// worker and an expected queue wait of at most 1s.
func DefaultConfig() Config {
	return Config{MaxBatch: 32, MaxWait: 50 * time.Millisecond, QueueSize: 1024, Workers: 1, MaxQueueDelay: time.Second}
}

// Validate is ValidateAt("batcher").
func (c Config) Validate() error { return c.ValidateAt("batcher") }

// ValidateAt reports every invalid field, each error naming it from path ("batcher.max_batch").
func (c Config) ValidateAt(path string) error {
	var errs []error
	if c.MaxBatch < 1 || c.MaxBatch > 1024 {
		errs = append(errs, fmt.Errorf("%s.max_batch: must be in [1, 1024], got %d", path, c.MaxBatch))
	}
	if c.MaxWait <= 0 || c.MaxWait > 10*time.Second {
		errs = append(errs, fmt.Errorf("%s.max_wait: must be in (0s, 10s], got %s", path, c.MaxWait))
	}
	switch {
	case c.QueueSize < 1 || c.QueueSize > 1<<20:
		errs = append(errs, fmt.Errorf("%s.queue_size: must be in [1, 1048576], got %d", path, c.QueueSize))
	case c.QueueSize < c.MaxBatch:
		// A queue smaller than a batch could never fill one.
		errs = append(errs, fmt.Errorf("%s.queue_size: must be >= max_batch (%d), got %d", path, c.MaxBatch, c.QueueSize))
	}
	if c.Workers < 1 || c.Workers > 64 {
		errs = append(errs, fmt.Errorf("%s.workers: must be in [1, 64], got %d", path, c.Workers))
	}
	if c.MaxQueueDelay < 0 || c.MaxQueueDelay > time.Minute {
		errs = append(errs, fmt.Errorf("%s.max_queue_delay: must be in [0s, 1m], got %s", path, c.MaxQueueDelay))
	}
	return errors.Join(errs...)
}
