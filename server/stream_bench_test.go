package server

import (
	"fmt"
	"io"
	"net/http"
	"testing"
)

// BenchmarkProxyChatStreamHit is BenchmarkProxyChatHit for a streamed answer: eight token
// chunks, the usage chunk and [DONE], each flushed by the replica, relayed through the
// sseFramer and the token counter to fasthttp's chunked writer.
func BenchmarkProxyChatStreamHit(b *testing.B) {
	ts := startServer(b)
	gen := func(w http.ResponseWriter, r *http.Request, body []byte) {
		w.Header().Set("Content-Type", "text/event-stream")
		f := w.(http.Flusher)
		for i := 0; i < 8; i++ {
			fmt.Fprintf(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok%d \"},\"finish_reason\":null}]}\n\n", i)
			f.Flush()
		}
		io.WriteString(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":8,\"total_tokens\":13}}\n\ndata: [DONE]\n\n")
		f.Flush()
	}
	ts.fast.onGenerate, ts.slow.onGenerate = gen, gen
	benchChat(b, ts.url, []byte(`{"messages":[{"role":"user","content":"hello p=0.1"}],"max_tokens":3,"stream":true}`))
}
