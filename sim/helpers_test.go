package sim

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// instantClock never really sleeps: virtual time jumps by each delay, and
// every delay is recorded in call order.
type instantClock struct {
	mu     sync.Mutex
	now    time.Time
	sleeps []time.Duration
}

func newInstantClock() *instantClock {
	return &instantClock{now: time.Unix(1_700_000_000, 0)}
}

func (c *instantClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *instantClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sleeps = append(c.sleeps, d)
	c.now = c.now.Add(d)
	return ctx.Err()
}

func (c *instantClock) recorded() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.sleeps...)
}

// gateClock blocks every Sleep until the test releases that very call, so
// a test decides exactly when each simulated delay ends.
type gateClock struct {
	calls chan sleepCall
	stop  chan struct{} // closed by unblock
	once  sync.Once
}

type sleepCall struct {
	d    time.Duration
	done chan struct{}
}

func (c sleepCall) release() { close(c.done) }

// newGateClock returns a gateClock. Register its unblock as a cleanup
// after start, so that it runs first and frees handlers left blocked by a
// failed test before the HTTP server waits for them.
func newGateClock() *gateClock {
	return &gateClock{calls: make(chan sleepCall), stop: make(chan struct{})}
}

// unblock makes every pending and future Sleep return at once.
func (c *gateClock) unblock() { c.once.Do(func() { close(c.stop) }) }

func (c *gateClock) Now() time.Time { return time.Now() }

func (c *gateClock) Sleep(ctx context.Context, d time.Duration) error {
	call := sleepCall{d: d, done: make(chan struct{})}
	select {
	case c.calls <- call:
	case <-c.stop:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-call.done:
		return nil
	case <-c.stop:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// next returns the next Sleep call, still blocked.
func (c *gateClock) next(t *testing.T) sleepCall {
	t.Helper()
	select {
	case call := <-c.calls:
		return call
	case <-time.After(5 * time.Second):
		t.Fatal("no Sleep call within 5s")
		return sleepCall{}
	}
}

// step lets the next Sleep call return at once and returns its duration.
func (c *gateClock) step(t *testing.T) time.Duration {
	t.Helper()
	call := c.next(t)
	call.release()
	return call.d
}

// zeroLatency is the fast preset without any delay or jitter.
func zeroLatency() Config {
	c := FastPreset()
	c.TTFTBase, c.PrefillPerToken, c.DecodePerToken, c.Jitter = 0, 0, 0, 0
	return c
}

// start runs a Server behind a real HTTP server on 127.0.0.1.
func start(t testing.TB, cfg Config, opts ...Options) (*Server, string) {
	t.Helper()
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	s, err := New(cfg, o)
	require.NoError(t, err)
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return s, ts.URL
}

func post(t *testing.T, url, body string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, b
}

func get(t *testing.T, url string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, b
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

// metricValue finds `name{model_name="..."} value` (labels beyond
// model_name given in extra, e.g. `finished_reason="stop"`) in /metrics.
func metricValue(t *testing.T, base, model, name, extra string) float64 {
	t.Helper()
	_, body := get(t, base+"/metrics")
	labels := []string{`model_name="` + model + `"`}
	if extra != "" {
		labels = append(labels, extra)
	}
	slices.Sort(labels) // the text format sorts labels by name
	want := name + "{" + strings.Join(labels, ",") + "} "
	for line := range strings.SplitSeq(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, want); ok {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err)
			return f
		}
	}
	t.Fatalf("metric %s not in /metrics:\n%s", want, body)
	return 0
}

// sseReader reads Server-Sent Events one by one.
type sseReader struct{ r *bufio.Reader }

// next returns the data of the next event.
func (s sseReader) next() (string, error) {
	line, err := s.r.ReadString('\n')
	if err != nil {
		return "", err
	}
	data, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "data: ")
	if !ok {
		return "", &badEvent{line}
	}
	blank, err := s.r.ReadString('\n')
	if err != nil {
		return "", err
	}
	if blank != "\n" {
		return "", &badEvent{blank}
	}
	return data, nil
}

type badEvent struct{ line string }

func (e *badEvent) Error() string { return "not an SSE data line: " + strconv.Quote(e.line) }

func jsonBody(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.NewDecoder(bytes.NewReader(b)).Decode(&m), string(b))
	return m
}
