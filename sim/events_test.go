package sim

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/triage-gw/triage/upstream/kvevents"
)

// subscribe follows srv's KV events with the gateway's subscriber and
// returns it with a channel signalled after each message it handled, once
// the first message has arrived (a PUB drops what it sends before it has
// seen the subscription, so ClearCache is published until one gets through).
func subscribe(t *testing.T, srv *Server) (*kvevents.Subscriber, chan struct{}) {
	t.Helper()
	handled := make(chan struct{}, 4096)
	sub, err := kvevents.NewSubscriber("sim", srv.Config().Name,
		kvevents.Config{Endpoint: srv.KVEventsEndpoint(), Topic: KVEventsTopic}, kvevents.Limits{},
		kvevents.Options{Handled: func() { handled <- struct{}{} }}, nil, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sub.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for {
		srv.ClearCache()
		select {
		case <-handled:
			return sub, handled
		case <-tick.C:
		case <-deadline:
			t.Fatal("no KV event reached the subscriber within 10s")
		}
	}
}

// until waits on handled until cond holds.
func until(t *testing.T, handled chan struct{}, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for !cond() {
		select {
		case <-handled:
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func TestTokenizeMatchesCounting(t *testing.T) {
	_, url := start(t, zeroLatency())
	msgs := []Message{{Role: "system", Content: "be brief"}, {Role: "user", Content: "hello there"}}
	resp, body := post(t, url+"/tokenize", `{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hello there"}],"add_generation_prompt":true}`)
	require.Equal(t, 200, resp.StatusCode)
	var out tokenizeResponse
	require.NoError(t, json.Unmarshal(body, &out))
	rendered := RenderChat(msgs)
	require.Equal(t, CountTokens(rendered), out.Count)
	require.Equal(t, Tokenize(rendered), out.Tokens)

	resp, body = post(t, url+"/tokenize", `{"model":"m","prompt":"abcdefghij"}`)
	require.Equal(t, 200, resp.StatusCode)
	require.NoError(t, json.Unmarshal(body, &out))
	require.Equal(t, []uint32{0x64636261, 0x68676665, 0x6a69}, out.Tokens)
}

// The events the simulator publishes describe its prefix cache exactly:
// the gateway's index, keyed by its own hash of the tokens /tokenize gives,
// matches as many leading blocks as the simulator reports cached.
func TestEventsFollowThePrefixCache(t *testing.T) {
	cfg := zeroLatency()
	cfg.KVCacheBlocks = 8
	cfg.BlockChars = 16 // 4 tokens a block
	cfg.KVEventsEndpoint = "tcp://127.0.0.1:0"
	srv, url := start(t, cfg)
	t.Cleanup(func() { srv.Close() })
	sub, handled := subscribe(t, srv)

	keys := func(prompt string) []uint64 { return kvevents.AppendKeys(nil, Tokenize(prompt), 4, 0) }
	a := strings.Repeat("a", 16) + strings.Repeat("b", 16) + strings.Repeat("c", 16) + "tail" // 3 full blocks
	resp, _ := post(t, url+"/v1/completions", `{"prompt":"`+a+`","max_tokens":1}`)
	require.Equal(t, 200, resp.StatusCode)
	until(t, handled, "3 blocks", func() bool { return sub.Blocks() == 3 })
	require.Equal(t, 3, sub.Leading(keys(a)))
	require.Equal(t, 4, sub.BlockSize())

	// A prompt sharing the first two blocks adds one block chained to them.
	b := strings.Repeat("a", 16) + strings.Repeat("b", 16) + strings.Repeat("d", 16)
	post(t, url+"/v1/completions", `{"prompt":"`+b+`","max_tokens":1}`)
	until(t, handled, "4 blocks", func() bool { return sub.Blocks() == 4 })
	require.Equal(t, 3, sub.Leading(keys(b)))

	// Eight new blocks evict everything older: BlockRemoved.
	c := strings.Repeat("0123456789abcdef", 8)
	post(t, url+"/v1/completions", `{"prompt":"`+c+`","max_tokens":1}`)
	until(t, handled, "eviction", func() bool { return sub.Leading(keys(a)) == 0 })
	require.Equal(t, 8, sub.Blocks())
	require.Equal(t, 8, sub.Leading(keys(c)))

	srv.ClearCache()
	until(t, handled, "AllBlocksCleared", func() bool { return sub.Blocks() == 0 })
}
