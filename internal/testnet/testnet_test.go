package testnet

import (
	"errors"
	"net"
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
