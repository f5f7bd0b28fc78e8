package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// errClientGone is the cause a request's context is cancelled with when its client closed or
// reset its connection while the request waited on a replica. It is answered 499 (nginx's
// "client closed request"), which nobody reads: the status is for the requests metric.
var errClientGone = errors.New("client closed the connection before the answer")

// statusClientClosedRequest is nginx's status for a request whose client left first.
const statusClientClosedRequest = 499

// goneEvery is how often the watcher looks at the connections of requests waiting on a
// replica: a client's departure cancels its request at most this long after its FIN or reset
// arrives (plus the sub-millisecond unwinding), and each look costs one non-blocking
// syscall per waiting request.
const goneEvery = 250 * time.Millisecond

// goneWatcher notices clients that leave while their request waits on a replica, and cancels
// the request, so that the upstream request is cancelled (its connection closes and vLLM
// aborts the generation) and the slow-path slot and in-flight count are given back at once
// rather than when the replica finishes.
//
// fasthttp has no CloseNotify: while a handler runs, nobody reads the client's socket, so a
// FIN or a reset sits there unseen until the answer is written. The watcher peeks at each
// watched socket without consuming anything (recv with MSG_PEEK|MSG_DONTWAIT, see peekConn):
// no data yet means alive; bytes mean a pipelined next request, alive (they stay where they
// are for fasthttp); end of file or a reset means gone. A client that pipelines a request and
// then closes is therefore not seen (its pending bytes hide the end of file); its answer is
// cut when written, as before.
//
// Only requests that go upstream are watched, only while their handler waits (the upstream
// call and, for a non-streaming answer, reading it): a stream's client is noticed by the
// failed write once the stream is handed to fasthttp. Connections that are not plain
// sockets (TLS, in-memory pipes in tests) are not watched: peeking at TLS records says nothing
// about the client's intent, and the gateway serves plain HTTP behind whatever terminates TLS.
//
// Concurrency: one goroutine, Run, owned by the server, scans; watch and unwatch are called
// from handlers. Everything the scan shares with them is under mu, and each watch's state
// is decided once, by compare-and-swap, so a request that ends as its client leaves is
// either cancelled or unwatched, never both.
type goneWatcher struct {
	every time.Duration
	gone  prometheus.Counter
	log   *slog.Logger

	mu      sync.Mutex
	watches map[*watch]struct{}
	scratch []*watch // the scan's copy of watches; only Run's goroutine (or a test's scan) uses it
	scanMu  sync.Mutex
}

// watch is one request being watched.
type watch struct {
	raw    syscall.RawConn
	cancel context.CancelCauseFunc
	state  atomic.Int32 // watching, unwatched or fired
}

const (
	watching int32 = iota
	unwatched
	fired
)

func newGoneWatcher(every time.Duration, gone prometheus.Counter, log *slog.Logger) *goneWatcher {
	return &goneWatcher{every: every, gone: gone, log: log, watches: make(map[*watch]struct{})}
}

// watch starts watching c for the request whose context cancel cancels; nil (nothing
// watched, and unwatch(nil) is a no-op) when c is not a plain socket.
func (g *goneWatcher) watch(c net.Conn, cancel context.CancelCauseFunc) *watch {
	raw := rawConn(c)
	if raw == nil {
		return nil
	}
	w := &watch{raw: raw, cancel: cancel}
	g.mu.Lock()
	g.watches[w] = struct{}{}
	g.mu.Unlock()
	return w
}

// unwatch stops watching; after it returns, the watcher will not cancel the request.
func (g *goneWatcher) unwatch(w *watch) {
	if w == nil {
		return
	}
	w.state.CompareAndSwap(watching, unwatched)
	g.mu.Lock()
	delete(g.watches, w)
	g.mu.Unlock()
}

// Run scans every g.every until ctx ends. It returns nil.
func (g *goneWatcher) Run(ctx context.Context) error {
	t := time.NewTicker(g.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			g.scanSafely()
		}
	}
}

func (g *goneWatcher) scanSafely() {
	defer func() {
		if p := recover(); p != nil {
			g.log.Error("recovered panic in the client-gone watcher", "panic", fmt.Sprint(p))
		}
	}()
	g.scan()
}

// scan peeks at every watched connection once and cancels the requests whose client has
// gone. The syscalls run outside mu, so handlers never wait for a scan. It returns how
// many requests it cancelled.
func (g *goneWatcher) scan() int {
	g.scanMu.Lock()
	defer g.scanMu.Unlock()
	g.mu.Lock()
	ws := g.scratch[:0]
	for w := range g.watches {
		ws = append(ws, w)
	}
	g.mu.Unlock()
	n := 0
	for i, w := range ws {
		ws[i] = nil // no reference kept past this scan
		if w.state.Load() != watching || peekConn(w.raw) != connGone {
			continue
		}
		if w.state.CompareAndSwap(watching, fired) {
			w.cancel(errClientGone)
			g.gone.Inc()
			n++
		}
	}
	g.scratch = ws[:0]
	return n
}

// count is the number of requests watched now.
func (g *goneWatcher) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.watches)
}

// connState is what a peek at a client's socket says.
type connState int

const (
	connUnknown connState = iota // cannot tell: keep watching
	connAlive
	connGone
)

// rawConn is the socket under a client connection, or nil when it is not a plain socket
// (TLS does not implement syscall.Conn).
func rawConn(c net.Conn) syscall.RawConn {
	if tc, ok := c.(*trackedConn); ok {
		return tc.raw
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return raw
}
