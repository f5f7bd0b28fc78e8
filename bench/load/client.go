package load

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/triage-gw/triage/bench/sse"
)

// NewClient returns an HTTP/1.1 keep-alive client that holds up to conns
// idle connections per host, so a closed loop of conns workers never
// re-dials. timeout bounds each request, body included. It never uses a
// proxy: benchmarks talk to 127.0.0.1 only.
func NewClient(conns int, timeout time.Duration) *http.Client {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        0,
		MaxIdleConnsPerHost: max(conns, 2),
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
		Proxy:               nil,
	}
	return &http.Client{Transport: tr, Timeout: timeout}
}

// PostJSON sends body to url and reads the answer to its end. keepBody
// returns the body in the Sample; otherwise it is discarded. Latency runs
// from sending to the end of the body. At is left for the loop to fill in.
func PostJSON(ctx context.Context, c *http.Client, url string, body []byte, keepBody bool) Sample {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return Sample{Err: err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return Sample{Latency: time.Since(start), Err: err.Error()}
	}
	var b []byte
	if keepBody {
		b, err = io.ReadAll(resp.Body)
	} else {
		_, err = io.Copy(io.Discard, resp.Body)
	}
	resp.Body.Close()
	s := Sample{Latency: time.Since(start), Status: resp.StatusCode, Header: resp.Header, Body: b}
	if err != nil {
		s.Err = err.Error()
	}
	return s
}

// PostStream posts a streaming request (an OpenAI chat or completion body
// with "stream": true) and times its server-sent events. The Sample's
// Latency is the stream's end to end time; a 200 whose stream ends without
// [DONE] or without any event is a failure (Err says so). For any other
// status the Timing is zero and the body is not read.
func PostStream(ctx context.Context, c *http.Client, url string, body []byte) (Sample, sse.Timing) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return Sample{Err: err.Error()}, sse.Timing{}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return Sample{Latency: time.Since(start), Err: err.Error()}, sse.Timing{}
	}
	defer resp.Body.Close()
	s := Sample{Status: resp.StatusCode, Header: resp.Header}
	if resp.StatusCode != http.StatusOK {
		s.Latency = time.Since(start)
		return s, sse.Timing{}
	}
	st, err := sse.Read(resp.Body, start)
	s.Latency = st.E2E
	switch {
	case err != nil:
		s.Err = err.Error()
	case !st.Done || st.Events == 0:
		s.Err = "stream ended without [DONE]"
	}
	return s, st
}
