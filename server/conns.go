package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Errors of the connection limits, answered by connListener before any request is read.
var (
	errTooManyConnections      = errors.New("the gateway has too many open connections (server.max_connections); retry shortly")
	errTooManyConnectionsPerIP = errors.New("too many open connections from your address (server.max_connections_per_ip); close some or retry shortly")
)

// Lingering close: a connection whose request body was not read to its end (an early 413 or
// 401) is not closed at once, because closing a socket with unread bytes in its receive
// buffer sends a TCP reset, and a client still writing its body (Python's urllib writes all
// of it before reading) then loses the answer already sent. Instead its write side is shut
// (the client reads the answer and then EOF) and what it still sends is read and dropped,
// up to these bounds, as net/http and nginx do.
const (
	lingerTimeout  = 2 * time.Second
	lingerMaxBytes = 8 << 20
)

// rejectTimeout bounds how long answering a connection over the limits may take, and
// maxRejecting how many such answers may be under way at once (beyond it, a connection over
// the limits is closed without an answer).
const (
	rejectTimeout = time.Second
	maxRejecting  = 64
)

// connListener bounds the client connections open at once, in all and per client address,
// and hands out conns whose Close can linger (see lingerTimeout). A connection over a limit is
// answered with a complete HTTP error response and closed by a goroutine of its own; Close
// waits for those.
type connListener struct {
	net.Listener
	max, perIP int
	open       prometheus.Gauge
	rejected   *prometheus.CounterVec // reason
	log        *slog.Logger
	answer     func(error) []byte // the full HTTP response for a rejected connection

	mu   sync.Mutex
	n    int
	byIP map[string]int // only when perIP > 0; an entry per address with open connections

	rejecting chan struct{} // semaphore of reject goroutines
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

func newConnListener(ln net.Listener, max, perIP int, m *metrics, log *slog.Logger, answer func(error) []byte) *connListener {
	l := &connListener{Listener: ln, max: max, perIP: perIP, open: m.connsOpen, rejected: m.connsRejected,
		log: log, answer: answer, rejecting: make(chan struct{}, maxRejecting)}
	if perIP > 0 {
		l.byIP = make(map[string]int)
	}
	return l
}

// Accept returns the next connection within the limits; it answers and drops the others.
func (l *connListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := remoteIP(c.RemoteAddr())
		if err := l.admit(ip); err != nil {
			l.reject(c, err)
			continue
		}
		tc := &trackedConn{Conn: c, l: l, ip: ip}
		if sc, ok := c.(syscall.Conn); ok {
			// Once per connection, so watching a request for its client's departure
			// (goneWatcher) allocates nothing for the socket.
			tc.raw, _ = sc.SyscallConn()
		}
		return tc, nil
	}
}

func (l *connListener) admit(ip string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n >= l.max {
		return errTooManyConnections
	}
	if l.byIP != nil {
		if l.byIP[ip] >= l.perIP {
			return errTooManyConnectionsPerIP
		}
		l.byIP[ip]++
	}
	l.n++
	l.open.Inc()
	return nil
}

func (l *connListener) release(ip string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n--
	l.open.Dec()
	if l.byIP != nil {
		if l.byIP[ip] <= 1 {
			delete(l.byIP, ip)
		} else {
			l.byIP[ip]--
		}
	}
}

// reject answers c with err's response and closes it, lingering briefly so the client reads
// the answer rather than a reset; it never blocks Accept.
func (l *connListener) reject(c net.Conn, err error) {
	reason := "max_connections"
	if errors.Is(err, errTooManyConnectionsPerIP) {
		reason = "max_connections_per_ip"
	}
	l.rejected.WithLabelValues(reason).Inc()
	select {
	case l.rejecting <- struct{}{}:
	default:
		c.Close() // already answering many: drop this one
		return
	}
	l.wg.Go(func() {
		defer func() { <-l.rejecting }()
		_ = c.SetDeadline(time.Now().Add(rejectTimeout))
		if _, err := c.Write(l.answer(err)); err == nil {
			linger(c, rejectTimeout, 64<<10)
		}
		c.Close()
	})
}

// Close closes the listener and waits for connections being rejected.
func (l *connListener) Close() error {
	l.closeOnce.Do(func() {
		l.closeErr = l.Listener.Close()
		l.wg.Wait()
	})
	return l.closeErr
}

// remoteIP is the address part of a connection's remote address.
func remoteIP(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// trackedConn is one admitted connection; Close gives its slot back, once, after lingering if
// the request asked for it (lingerOnClose).
type trackedConn struct {
	net.Conn
	l   *connListener
	ip  string
	raw syscall.RawConn // the socket, for goneWatcher; nil when Conn is not a plain socket

	mu        sync.Mutex
	lingering bool
	closed    bool
}

// lingerOnClose makes Close shut the write side and read what the client still sends for a
// bounded time before closing (see lingerTimeout).
func (c *trackedConn) lingerOnClose() {
	c.mu.Lock()
	c.lingering = true
	c.mu.Unlock()
}

func (c *trackedConn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	lingering := c.lingering
	c.mu.Unlock()
	if lingering {
		linger(c.Conn, lingerTimeout, lingerMaxBytes)
	}
	err := c.Conn.Close()
	c.l.release(c.ip)
	return err
}

// linger shuts c's write side, so the client sees the answer end, and reads and drops what it
// still sends until it closes, d passes or max bytes were read.
func linger(c net.Conn, d time.Duration, max int64) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, _ = io.Copy(io.Discard, io.LimitReader(c, max))
}

// rawErrorResponse is a complete HTTP/1.1 answer for err, written on a connection no request
// was read from: the same status and OpenAI-shaped body errorResponse gives, and
// Connection: close.
func rawErrorResponse(err error, log *slog.Logger) []byte {
	ae := errorResponse(err, log)
	body, _ := json.Marshal(ae.body())
	head := fmt.Sprintf("HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n",
		ae.status, http.StatusText(ae.status), len(body))
	if ae.retryAfter != "" {
		head += "Retry-After: " + ae.retryAfter + "\r\n"
	}
	return append([]byte(head+"\r\n"), body...)
}

// lingerConn asks a request's connection to linger when it closes, if it is one of ours.
func lingerConn(c net.Conn) {
	if tc, ok := c.(*trackedConn); ok {
		tc.lingerOnClose()
	}
}
