package mockllm

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/sim"
)

func TestParseFlags(t *testing.T) {
	o, err := parseFlags([]string{"--preset", "slow", "--name", "slow-0", "--decode-per-token", "10ms", "--listen", "127.0.0.1:0"}, io.Discard)
	require.NoError(t, err)
	want := sim.SlowPreset()
	want.Name, want.DecodePerToken = "slow-0", 10*time.Millisecond
	assert.Equal(t, want, o.cfg)
	assert.Equal(t, "127.0.0.1:0", o.listen)

	o, err = parseFlags(nil, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, sim.FastPreset(), o.cfg)
	assert.Equal(t, "127.0.0.1:8000", o.listen)

	_, err = parseFlags([]string{"--preset", "medium"}, io.Discard)
	assert.ErrorContains(t, err, "--preset")
	_, err = parseFlags([]string{"extra"}, io.Discard)
	assert.ErrorContains(t, err, "unexpected arguments")
}

func TestHelpListsEveryFlagWithDefaults(t *testing.T) {
	var out bytes.Buffer
	err := run(context.Background(), []string{"--help"}, &out, nil)
	require.ErrorIs(t, err, flag.ErrHelp)
	for _, f := range []string{"--listen", "--preset", "--name", "--seed", "--max-running", "--decode-per-token",
		"--error-rate", "--close-mid-stream-rate", "--kv-cache-blocks", "--stall-first-byte"} {
		assert.Contains(t, out.String(), "  "+f+" ")
	}
	assert.Contains(t, out.String(), `(default "32"; slow preset "8")`)
	assert.Contains(t, out.String(), `(default "1.5ms"; slow preset "40ms")`)
}

func TestInvalidConfigFails(t *testing.T) {
	err := run(context.Background(), []string{"--max-running", "0", "--error-rate", "2", "--listen", "127.0.0.1:0"}, io.Discard, nil)
	assert.ErrorContains(t, err, "sim.max_running: must be >= 1")
	assert.ErrorContains(t, err, "sim.error_rate: must be in [0, 1]")
}

func TestRunServesUntilCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan net.Addr, 1)
	done := make(chan error, 1)
	var logs syncBuffer
	go func() {
		done <- run(ctx, []string{"--listen", "127.0.0.1:0", "--name", "r1", "--ttft-base", "0s",
			"--decode-per-token", "0s", "--prefill-per-token", "0s"}, &logs, func(a net.Addr) { addrs <- a })
	}()
	var base string
	select {
	case a := <-addrs:
		base = "http://" + a.String()
	case err := <-done:
		t.Fatalf("run returned early: %v", err)
	}

	resp, err := http.Get(base + "/health")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	// The container health check probes this server, and fails where none listens.
	require.NoError(t, run(ctx, []string{"--healthcheck", "--listen", strings.TrimPrefix(base, "http://")}, io.Discard, nil))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	free := ln.Addr().String()
	ln.Close()
	require.ErrorContains(t, run(ctx, []string{"--healthcheck", "--listen", free}, io.Discard, nil), "health check")

	resp, err = http.Post(base+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "r1", resp.Header.Get(sim.HeaderReplica))

	cancel()
	require.NoError(t, <-done)
	assert.Contains(t, logs.String(), `"msg":"mockllm listening"`)
	assert.Contains(t, logs.String(), `"msg":"mockllm stopped"`)
}

func TestListenErrorIsReturned(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	err = run(context.Background(), []string{"--listen", ln.Addr().String()}, io.Discard, nil)
	var opErr *net.OpError
	assert.True(t, errors.As(err, &opErr), "got %v", err)
}
