//go:build unix

// Package testnet gives tests a loopback address where a connection is refused, and stays
// refused for the whole test.
//
// The usual way (listen on port 0, close, use the port) frees the port at once. Then a test
// that expects "connection refused" can meet a connection that opens and never answers (CI saw
// a 504 "no response in time" where a 502 "connection refused" was asserted): under a parallel
// `go test ./...` another test's server may bind the port, and a client's own connect may
// pick that port as its source port and connect to itself (a TCP self-connect; the port is in
// the ephemeral range, and the gateway retries and health-checks the dead replica). Here the
// port stays bound by a socket that never listens: the kernel refuses every connection to it,
// and neither a port-0 listen nor a connect's source port can take it until the test ends.
package testnet

import (
	"fmt"
	"net"
	"strconv"
	"syscall"
	"testing"
)

// RefusedAddr returns "127.0.0.1:port" where connecting is refused until t ends.
func RefusedAddr(t testing.TB) string {
	t.Helper()
	fd := hold(t, 0, false)
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

// HoldPort keeps a just-closed loopback server's port refusing connections until t ends, for
// tests where a replica goes down: without it, the port is free for any other test's server
// to take, and the gateway's own reconnects can even connect the port to itself (a TCP
// self-connect: an ephemeral source port equal to the destination), a connection that never
// answers. addr is the server's "127.0.0.1:port" or URL host.
func HoldPort(t testing.TB, addr string) {
	t.Helper()
	_, ps, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("testnet: %q: %v", addr, err)
	}
	port, err := strconv.Atoi(ps)
	if err != nil {
		t.Fatalf("testnet: %q: %v", addr, err)
	}
	// SO_REUSEADDR: the closed server's connections may linger in TIME_WAIT on this port.
	// Ports held by an explicit bind are still skipped by the kernel's own port choice
	// (listening on port 0, a connect's source port).
	hold(t, port, true)
}

// hold binds a TCP socket to 127.0.0.1:port and never listens on it; it is closed when t ends.
func hold(t testing.TB, port int, reuse bool) int {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatalf("testnet: socket: %v", err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	syscall.CloseOnExec(fd)
	if reuse {
		if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
			t.Fatalf("testnet: SO_REUSEADDR: %v", err)
		}
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("testnet: bind 127.0.0.1:%d: %v", port, err)
	}
	return fd
}
