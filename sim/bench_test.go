package sim

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// BenchmarkChatCompletionRoundTrip measures the simulator's own overhead:
// one non-streaming chat request over real HTTP with every delay at zero.
func BenchmarkChatCompletionRoundTrip(b *testing.B) {
	_, base := start(b, zeroLatency())
	body := `{"model":"m","max_tokens":16,"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Name a colour."}]}`
	client := &http.Client{}
	b.ReportAllocs()
	for b.Loop() {
		resp, err := client.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
}

// BenchmarkStreamingRoundTrip is the same for a 16-token stream.
func BenchmarkStreamingRoundTrip(b *testing.B) {
	_, base := start(b, zeroLatency())
	body := `{"model":"m","stream":true,"max_tokens":16,"messages":[{"role":"user","content":"Name a colour."}]}`
	client := &http.Client{}
	for b.Loop() {
		resp, err := client.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	b.ReportMetric(float64(b.N)*16/b.Elapsed().Seconds(), "tokens/s")
}
