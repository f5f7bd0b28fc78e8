package main

import (
	"context"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPprofServesProfilesOnLoopbackOnly(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:6060", ":6060", "192.0.2.1:6060", "example.com:6060"} {
		_, err := listenPprof(addr)
		require.ErrorContains(t, err, "is not a loopback address", addr)
	}
	_, err := runArgs(t, "--simulate", "--listen", "127.0.0.1:0", "--pprof", "0.0.0.0:6060")
	require.ErrorContains(t, err, `--pprof: "0.0.0.0:6060" is not a loopback address`, "refused before anything serves")
	_, err = listenPprof("127.0.0.1")
	require.ErrorContains(t, err, "--pprof: address 127.0.0.1: missing port")

	p, err := listenPprof("127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	resp, err := http.Get("http://" + p.Addr().String() + "/debug/pprof/cmdline")
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NotEmpty(t, b, "the command line of this process")
	resp, err = http.Get("http://" + p.Addr().String() + "/debug/pprof/heap?debug=1")
	require.NoError(t, err)
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Contains(t, string(b), "heap profile")
	cancel()
	require.NoError(t, <-done, "a clean stop")
	_, err = http.Get("http://" + p.Addr().String() + "/debug/pprof/")
	require.Error(t, err, "closed after Run")
}
