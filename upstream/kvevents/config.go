package kvevents

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// Subscription modes: which side of the TCP connection the gateway is.
const (
	// ModeConnect dials the engine's PUB socket: vLLM's endpoint has "*"
	// (tcp://*:5557) and binds.
	ModeConnect = "connect"
	// ModeBind listens for the engine to dial in: vLLM's endpoint names a
	// host (tcp://gateway:5557) and connects.
	ModeBind = "bind"
)

// Config is one replica's KV-event subscription.
type Config struct {
	// Endpoint is the ZMQ endpoint, tcp://host:port. In connect mode it is
	// the engine's address (tcp://10.0.0.7:5557); in bind mode the address
	// the gateway listens on (tcp://*:5557 or tcp://0.0.0.0:5557). Only
	// tcp is supported. Empty: asked from the engine (vLLM's GET
	// /kv_event_sources, see ParseSources and Options.Discover) when the
	// subscriber runs, together with Topic and ReplayEndpoint, which must
	// then be empty; connect mode only.
	Endpoint string `yaml:"endpoint" json:"endpoint"`
	// Topic is the subscription prefix; vLLM's kv-events-config "topic".
	// Empty subscribes to everything the publisher sends.
	Topic string `yaml:"topic" json:"topic"`
	// Mode is "connect" (default) or "bind".
	Mode string `yaml:"mode" json:"mode"`
	// ReplayEndpoint is the engine's replay socket (vLLM's kv-events-config
	// "replay_endpoint", a ROUTER it binds), tcp://host:port: after a
	// sequence gap the subscriber asks it for the missed batches and
	// applies them before going on. Empty: gaps are counted, not repaired.
	ReplayEndpoint string `yaml:"replay_endpoint,omitempty" json:"replay_endpoint,omitempty"`
}

// Limits bound what one replica's publisher can make the gateway hold,
// whatever it sends. The zero value means the defaults.
type Limits struct {
	// MaxBlocks bounds the blocks indexed per replica; beyond it the oldest
	// stored are forgotten. Default 1<<20 (about 100 MB at worst).
	MaxBlocks int `yaml:"max_blocks" json:"max_blocks"`
	// MaxMessageBytes bounds one ZMQ message (all its frames); larger ones
	// are read past without being kept. Default 16 MiB.
	MaxMessageBytes int `yaml:"max_message_bytes" json:"max_message_bytes"`
	// MaxTokensPerEvent bounds the token_ids of one BlockStored; a larger
	// event's blocks are not indexed. Default 1<<20.
	MaxTokensPerEvent int `yaml:"max_tokens_per_event" json:"max_tokens_per_event"`
	// MaxPendingBlocks bounds the picked-but-unconfirmed keys per replica.
	// Default 1<<16.
	MaxPendingBlocks int `yaml:"max_pending_blocks" json:"max_pending_blocks"`
}

// DefaultLimits returns the default bounds.
func DefaultLimits() Limits {
	return Limits{MaxBlocks: 1 << 20, MaxMessageBytes: 16 << 20, MaxTokensPerEvent: 1 << 20, MaxPendingBlocks: 1 << 16}
}

// maxBound caps every limit: far above any engine's cache, and low enough
// that a typo cannot ask for terabytes.
const maxBound = 1 << 26

// ValidateAt reports every invalid limit, each named from path.
func (l Limits) ValidateAt(path string) error {
	var errs []error
	for _, f := range []struct {
		name string
		v    int
	}{
		{"max_blocks", l.MaxBlocks},
		{"max_message_bytes", l.MaxMessageBytes},
		{"max_tokens_per_event", l.MaxTokensPerEvent},
		{"max_pending_blocks", l.MaxPendingBlocks},
	} {
		if f.v < 1 || f.v > maxBound {
			errs = append(errs, fmt.Errorf("%s.%s: must be in [1, %d], got %d", path, f.name, maxBound, f.v))
		}
	}
	return errors.Join(errs...)
}

// ValidateAt reports every invalid field, each named from path
// ("pools.fast.replicas[0].kv_events").
func (c Config) ValidateAt(path string) error {
	var errs []error
	mode := c.Mode
	switch mode {
	case "", ModeConnect, ModeBind:
	default:
		errs = append(errs, fmt.Errorf("%s.mode: must be %q or %q, got %q", path, ModeConnect, ModeBind, c.Mode))
	}
	switch {
	case c.Endpoint == "" && c.Mode == ModeBind:
		errs = append(errs, fmt.Errorf("%s.endpoint: required in bind mode (the address to listen on); "+
			"an empty endpoint is asked from the engine, in connect mode only", path))
	case c.Endpoint == "" && (c.Topic != "" || c.ReplayEndpoint != ""):
		errs = append(errs, fmt.Errorf("%s.endpoint: empty, so the endpoint, topic and replay_endpoint are asked from the engine; "+
			"set endpoint too, or leave topic and replay_endpoint empty", path))
	case c.Endpoint == "":
	default:
		if _, err := c.address(); err != nil {
			errs = append(errs, fmt.Errorf("%s.endpoint: %w", path, err))
		}
	}
	if c.ReplayEndpoint != "" {
		if _, err := (Config{Endpoint: c.ReplayEndpoint}).address(); err != nil {
			errs = append(errs, fmt.Errorf("%s.replay_endpoint: %w", path, err))
		}
	}
	return errors.Join(errs...)
}

// address returns the host:port to dial or listen on.
func (c Config) address() (string, error) {
	if c.Endpoint == "" {
		return "", errors.New("required (tcp://host:port)")
	}
	rest, ok := strings.CutPrefix(c.Endpoint, "tcp://")
	if !ok {
		return "", fmt.Errorf("%q: only tcp://host:port endpoints are supported", c.Endpoint)
	}
	host, port, err := net.SplitHostPort(rest)
	if err != nil {
		return "", fmt.Errorf("%q: want tcp://host:port: %v", c.Endpoint, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("%q: port must be a number in [1, 65535]", c.Endpoint)
	}
	bind := c.Mode == ModeBind
	switch {
	case host == "*" && !bind:
		return "", fmt.Errorf("%q: host * means every interface, which cannot be dialled; "+
			"in connect mode name the engine's host (vLLM binds tcp://*:5557, the gateway connects to tcp://ENGINE:5557), "+
			"or set mode: bind", c.Endpoint)
	case host == "*":
		host = ""
	case host == "":
		if !bind {
			return "", fmt.Errorf("%q: connect mode needs a host", c.Endpoint)
		}
	}
	return net.JoinHostPort(host, port), nil
}

// Options tune a Subscriber's timing; the zero value means the defaults.
type Options struct {
	// StaleAfter: a replica whose stream has been down this long, or that
	// was picked for new blocks this long ago without sending any event
	// since, is not Live. Default 10s.
	StaleAfter time.Duration
	// PendingTTL is how long a pick's blocks count as held on the chosen
	// replica before its BlockStored confirms them. Default 2s.
	PendingTTL time.Duration
	// Now tells time. Nil means time.Now.
	Now func() time.Time
	// Discover, for a Config without an Endpoint, asks the engine where it
	// publishes (package upstream: GET /kv_event_sources, read by
	// ParseSources). Run calls it until it answers, backing off between
	// failures, and again before each reconnect after a failed dial, so an
	// engine restarted on another port is followed. Nil: Config.Endpoint is
	// required.
	Discover func(ctx context.Context) (Config, error)
	// Handled, when set, is called after each message from a publisher has
	// been handled, whatever became of it (applied, dropped, undecodable),
	// from the connection's goroutine: tests wait on it. Nil: nothing.
	Handled func()
}
