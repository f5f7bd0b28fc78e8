//go:build linux || darwin || freebsd || netbsd || openbsd

package server

import (
	"errors"
	"syscall"

	"golang.org/x/sys/unix"
)

// peekConn looks at a socket without consuming anything and without blocking: no data yet
// (EAGAIN) is a client still waiting; bytes are a pipelined next request, left for fasthttp to
// read; end of file (the client closed, or shut its write side, which net/http treats as
// gone too) or a reset is a client gone. A closed descriptor reads as gone: whatever closed
// it, nobody is left to answer. Any other error says nothing either way.
func peekConn(raw syscall.RawConn) connState {
	var (
		n   int
		err error
		buf [1]byte
	)
	if cerr := raw.Control(func(fd uintptr) {
		n, _, err = unix.Recvfrom(int(fd), buf[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
	}); cerr != nil {
		return connGone
	}
	switch {
	case err == nil && n == 0:
		return connGone
	case err == nil:
		return connAlive
	case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.EWOULDBLOCK), errors.Is(err, unix.EINTR):
		return connAlive
	case errors.Is(err, unix.ECONNRESET), errors.Is(err, unix.ETIMEDOUT), errors.Is(err, unix.EPIPE),
		errors.Is(err, unix.ENOTCONN):
		return connGone
	}
	return connUnknown
}
