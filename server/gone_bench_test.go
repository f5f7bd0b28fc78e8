package server

import (
	"bytes"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// BenchmarkProxyChatHit is a non-streaming chat completion through the whole gateway, its
// classification a cache hit, against a replica that answers at once: the request path the
// client-gone watcher adds to (one watch and unwatch per request that goes upstream).
func BenchmarkProxyChatHit(b *testing.B) {
	ts := startServer(b)
	benchChat(b, ts.url, []byte(`{"messages":[{"role":"user","content":"hello p=0.1"}],"max_tokens":3}`))
}

// benchChat posts body to url's chat completions once (the first classifies; the rest hit
// the cache), then b.N times, each read to the end, over one keep-alive connection.
func benchChat(b *testing.B, url string, body []byte) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	post := func() {
		resp, err := client.Post(url+"/v1/chat/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
	post()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		post()
	}
}

// BenchmarkGoneWatch is what the watcher costs a request that goes upstream: one watch and
// one unwatch of a real socket.
func BenchmarkGoneWatch(b *testing.B) {
	g := newGoneWatcher(time.Hour, prometheus.NewCounter(prometheus.CounterOpts{Name: "gone"}), nil)
	srv, _ := tcpPair(b)
	cancel := func(error) {}
	b.ReportAllocs()
	for b.Loop() {
		g.unwatch(g.watch(srv, cancel))
	}
}
