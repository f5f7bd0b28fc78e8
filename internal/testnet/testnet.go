//go:build unix

// Package testnet gives tests a loopback address where a connection is refused, and stays
// refused for the whole test.
//
// The usual way (listen on port 0, close, use the port) frees the port at once: under a
// parallel `go test ./...` another test's server can bind it a moment later, and a test that
// expected "connection refused" meets a server that accepts and never answers (CI saw a 504
// "no response in time" where a 502 "connection refused" was asserted). Here the port stays
// bound by a socket that never listens, so the kernel refuses every connection to it and no
// other socket can take it until the test ends.
package testnet

import (
	"fmt"
	"syscall"
	"testing"
)

// RefusedAddr returns "127.0.0.1:port" where connecting is refused until t ends.
func RefusedAddr(t testing.TB) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatalf("testnet: socket: %v", err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	syscall.CloseOnExec(fd)
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("testnet: bind: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatalf("testnet: getsockname: %v", err)
	}
	in4, ok := sa.(*syscall.SockaddrInet4)
	if !ok {
		t.Fatalf("testnet: getsockname gave %T", sa)
	}
	return fmt.Sprintf("127.0.0.1:%d", in4.Port)
}

// RefusedURL is RefusedAddr as an http:// URL.
func RefusedURL(t testing.TB) string {
	t.Helper()
	return "http://" + RefusedAddr(t)
}
