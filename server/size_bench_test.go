package server

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/triage-gw/triage/upstream"
)

// BenchmarkProxyChatSize is BenchmarkProxyChatHit with a long message: a chat completion
// whose user message is 1 KB, 100 KB or 1 MB of prose (an agent's pasted file), non-streamed
// and streamed, through the whole gateway to a replica that reads the request and answers at
// once. Its classification is a cache hit after the first request, so what grows with the
// size is the gateway reading the body and rewriting it for the replica, and the client's
// and the replica's reads and writes of it (the same in every variant).
//
//	go test -run '^$' -bench ProxyChatSize ./server/
func BenchmarkProxyChatSize(b *testing.B) {
	for _, kb := range []int{1, 100, 1000} {
		for _, stream := range []bool{false, true} {
			b.Run(fmt.Sprintf("kb=%d/stream=%v", kb, stream), func(b *testing.B) {
				// A replica that reads the request and answers at once, without decoding it:
				// what grows with the size is the gateway's (and the client's) work.
				up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					io.Copy(io.Discard, r.Body)
					if !stream {
						w.Header().Set("Content-Type", "application/json")
						io.WriteString(w, `{"object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
						return
					}
					w.Header().Set("Content-Type", "text/event-stream")
					io.WriteString(w, "data: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"}}]}\n\n"+
						"data: {\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1,\"total_tokens\":2}}\n\n"+
						"data: [DONE]\n\n")
				}))
				b.Cleanup(up.Close)
				ts := startServer(b, func(c *gatewayConfig, _ *testOptions) {
					c.Server.BodyLimit = 4 << 20
					for _, p := range []*upstream.PoolConfig{&c.Pools.Fast, &c.Pools.Slow} {
						p.Replicas[0].URL = up.URL
					}
				})
				msg := "Review this file p=0.1\n" + strings.Repeat("The quick brown fox jumps over the \"lazy\" dog.\n", kb*1024/48)
				body, _ := json.Marshal(map[string]any{"model": "auto", "stream": stream, "max_tokens": 3,
					"messages": []map[string]string{{"role": "system", "content": "You are helpful."}, {"role": "user", "content": msg}}})
				b.SetBytes(int64(len(body)))
				benchChat(b, ts.url, body)
			})
		}
	}
}
