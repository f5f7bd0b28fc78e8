package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// chunkReader hands out data in the given chunk sizes, then ends with end (io.EOF or a break).
type chunkReader struct {
	data  []byte
	sizes []int
	end   error
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, r.end
	}
	n := len(r.data)
	if len(r.sizes) > 0 {
		n = max(1, min(n, r.sizes[0]))
		r.sizes = r.sizes[1:]
	}
	n = copy(p, r.data[:n])
	r.data = r.data[n:]
	return n, nil
}

var errBroke = errors.New("connection reset")

func breakEvent(error) []byte { return []byte("event: error\ndata: {}\n\ndata: [DONE]\n\n") }

// checkFramed holds the framer to its contract for one input: a stream that ends cleanly
// passes through byte for byte; one that breaks passes its whole events, none of the partial
// one, then the break event.
func checkFramed(t *testing.T, in []byte, sizes []int, broke bool) {
	t.Helper()
	end := io.EOF
	if broke {
		end = errBroke
	}
	f := newSSEFramer(&chunkReader{data: in, sizes: sizes, end: end}, breakEvent)
	out, err := io.ReadAll(f)
	require.NoError(t, err, "the framer always ends with io.EOF")
	if !broke {
		require.Equal(t, string(in), string(out))
		require.True(t, f.eof)
		return
	}
	require.ErrorIs(t, f.err, errBroke)
	var lines sseLines
	whole := in[:lines.scan(in, 0, 0)]
	if len(in) >= maxHeldEvent {
		return // an over-long event is passed on as it comes
	}
	require.Equal(t, string(whole)+string(breakEvent(nil)), string(out))
}

func TestSSEFramerPassesWholeEvents(t *testing.T) {
	events := "data: {\"n\":1}\n\ndata: {\"n\":2}\n\n: comment\n\nevent: x\ndata: a\ndata: b\n\ndata: [DONE]\n\n"
	crlf := strings.ReplaceAll(events, "\n", "\r\n")
	for _, in := range []string{events, crlf, events + "data: {\"cut", "data: no end"} {
		for _, sizes := range [][]int{nil, {1}, {3, 1, 7, 2, 100}, {5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5}} {
			checkFramed(t, []byte(in), append([]int(nil), sizes...), false)
			checkFramed(t, []byte(in), append([]int(nil), sizes...), true)
		}
	}
}

// TestSSEFramerHandsEventsOnAtOnce: a complete event is handed on as soon as it has arrived,
// without waiting for the next one.
func TestSSEFramerHandsEventsOnAtOnce(t *testing.T) {
	pr, pw := io.Pipe()
	f := newSSEFramer(pr, breakEvent)
	go func() {
		pw.Write([]byte("data: 1\n\ndata: 2"))
	}()
	buf := make([]byte, 64)
	n, err := f.Read(buf)
	require.NoError(t, err)
	require.Equal(t, "data: 1\n\n", string(buf[:n]))
	pw.CloseWithError(errBroke)
	rest, err := io.ReadAll(f)
	require.NoError(t, err)
	require.Equal(t, string(breakEvent(nil)), string(rest))
}

func FuzzSSEFramer(f *testing.F) {
	f.Add([]byte("data: {\"n\":1}\n\ndata: [DONE]\n\n"), []byte{3, 1, 9}, false)
	f.Add([]byte("data: a\r\n\r\ndata: b"), []byte{1}, true)
	f.Add([]byte("event: e\rdata: x\r\r"), []byte{}, true)
	f.Fuzz(func(t *testing.T, in, sizes []byte, broke bool) {
		s := make([]int, len(sizes))
		for i, b := range sizes {
			s[i] = int(b)
		}
		checkFramed(t, in, s, broke)
	})
}

// TestBrokenUpstreamStreamEndsWithAnErrorEvent: a replica that dies in the middle of an SSE
// event used to leave the client with a chunked body cut off (an "unexpected EOF" and half an
// event). Now the client gets the whole events, an error event in the OpenAI shape, [DONE]
// and a clean end of the body; the slot and the request are released.
func TestBrokenUpstreamStreamEndsWithAnErrorEvent(t *testing.T) {
	ts := startServer(t)
	ts.slow.onGenerate = func(w http.ResponseWriter, r *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "data: {\"n\":1}\n\ndata: {\"n\":2}\n\ndata: {\"n\":3, \"half")
		w.(http.Flusher).Flush()
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	}
	resp, err := http.Post(ts.url+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"stream":true,"messages":[{"role":"user","content":"story p=0.9"}]}`))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err, "the response body ends cleanly: %q", body)

	sc := bufio.NewScanner(bytes.NewReader(body))
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	require.Equal(t, []string{`data: {"n":1}`, "", `data: {"n":2}`, "", "event: error"}, lines[:5], "whole events only: %q", body)
	var ev errorBody
	require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(lines[5], "data: ")), &ev))
	require.Equal(t, typeUpstream, ev.Error.Type)
	require.Contains(t, ev.Error.Message, "upstream slow/slow-0")
	require.Equal(t, []string{"", "data: [DONE]", ""}, lines[6:])
	eventually(t, func() bool { return ts.router.State().SlowActive == 0 && ts.active.count() == 0 }, "slot and request released")
}
