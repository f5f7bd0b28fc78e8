package kvevents

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sort"
	"strings"
)

// SourcesPath is where vLLM says where it publishes its KV events: GET
// /kv_event_sources answers {"<data-parallel rank>": <its KVEventsConfig>},
// e.g. {"0":{"enable_kv_cache_events":true,"publisher":"zmq",
// "endpoint":"tcp://*:5557","replay_endpoint":null,"buffer_steps":10000,
// "hwm":100000,"max_queue_size":100000,"topic":"kv-events"}} from vLLM 0.32,
// and {} when events are off. The endpoint is the one the publisher bound
// or connected to, the rank's port offset included.
const SourcesPath = "/kv_event_sources"

// ErrNoSources is ParseSources' error for an engine that publishes no KV
// events.
var ErrNoSources = errors.New("the engine publishes no KV events (vLLM: start it with --kv-events-config " +
	`'{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:5557"}')`)

// source is one rank's entry of the /kv_event_sources answer; other fields
// are ignored.
type source struct {
	Enabled        bool    `json:"enable_kv_cache_events"`
	Publisher      string  `json:"publisher"`
	Endpoint       string  `json:"endpoint"`
	ReplayEndpoint *string `json:"replay_endpoint"`
	Topic          string  `json:"topic"`
}

// ParseSources turns an engine's /kv_event_sources answer into the
// connect-mode subscription of its one publisher. A wildcard host in an
// endpoint (*, 0.0.0.0, ::: the engine bound every interface) becomes host,
// the address the gateway reaches the replica at; a named host is kept.
// An engine with several publishers (data-parallel ranks) is refused:
// discovery follows one stream, and half the ranks' blocks would be
// missing; configure such a replica's endpoint in bind mode instead.
func ParseSources(body []byte, host string) (Config, error) {
	var srcs map[string]source
	if err := json.Unmarshal(body, &srcs); err != nil {
		return Config{}, fmt.Errorf("decode %s: %w", SourcesPath, err)
	}
	if len(srcs) == 0 {
		return Config{}, ErrNoSources
	}
	if len(srcs) > 1 {
		ranks := make([]string, 0, len(srcs))
		for r := range srcs {
			ranks = append(ranks, r)
		}
		sort.Strings(ranks)
		return Config{}, fmt.Errorf("the engine publishes KV events from %d data-parallel ranks (%s); "+
			"discovery follows one stream: set kv_events.endpoint with mode: bind and point every rank at it",
			len(srcs), strings.Join(ranks, ", "))
	}
	var s source
	for _, v := range srcs {
		s = v
	}
	if !s.Enabled || s.Publisher != "zmq" {
		return Config{}, fmt.Errorf("the engine's KV-event publisher is %q (enabled %t); only zmq is supported: %w",
			s.Publisher, s.Enabled, ErrNoSources)
	}
	cfg := Config{Topic: s.Topic, Mode: ModeConnect}
	var err error
	if cfg.Endpoint, err = reachable(s.Endpoint, host); err != nil {
		return Config{}, fmt.Errorf("endpoint: %w", err)
	}
	if s.ReplayEndpoint != nil && *s.ReplayEndpoint != "" {
		if cfg.ReplayEndpoint, err = reachable(*s.ReplayEndpoint, host); err != nil {
			return Config{}, fmt.Errorf("replay_endpoint: %w", err)
		}
	}
	return cfg, cfg.ValidateAt("discovered kv_events")
}

// reachable rewrites a tcp endpoint whose host is a wildcard to host.
func reachable(endpoint, host string) (string, error) {
	rest, ok := strings.CutPrefix(endpoint, "tcp://")
	if !ok {
		return "", fmt.Errorf("%q: only tcp endpoints can be subscribed to from another host", endpoint)
	}
	h, port, err := net.SplitHostPort(rest)
	if err != nil {
		return "", fmt.Errorf("%q: want tcp://host:port: %v", endpoint, err)
	}
	switch h {
	case "*", "", "0.0.0.0", "::":
		h = host
	}
	return "tcp://" + net.JoinHostPort(h, port), nil
}
