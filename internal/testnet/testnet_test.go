package testnet

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRefusedAddrRefusesAndCannotBeTaken(t *testing.T) {
	addr := RefusedAddr(t)
	for range 3 {
		_, err := net.DialTimeout("tcp", addr, time.Second)
		require.Error(t, err)
		require.True(t, errors.Is(err, syscall.ECONNREFUSED), "refused, not timed out: %v", err)
	}
	_, err := net.Listen("tcp", addr)
	require.Error(t, err, "nobody else can bind the port while the test runs")
}

func TestHoldPortAfterAServerWithConnectionsCloses(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	for range 3 { // keep-alive connections, closed by the server below: TIME_WAIT on its port
		resp, err := http.Get(srv.URL)
		require.NoError(t, err)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	addr := srv.Listener.Addr().String()
	srv.Close()
	HoldPort(t, addr)
	_, err := net.DialTimeout("tcp", addr, time.Second)
	require.True(t, errors.Is(err, syscall.ECONNREFUSED), "refused: %v", err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	require.NotEqual(t, addr, ln.Addr().String())
}
