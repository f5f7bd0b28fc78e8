// Package redistest runs a real redis-server for tests: the Debian package that
// scripts/setup.sh redis installs, on a free 127.0.0.1 port, without persistence. Tests that
// use it fail, not skip, when redis-server is missing.
//
// Each Server belongs to one test: Start launches it, t.Cleanup kills it. Stop and Start may
// be called again to take it down and bring it back on the same port (outage tests).
package redistest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/internal/childproc"
)

// Server is a real redis-server (the Debian package scripts/setup.sh redis installs)
// on a free 127.0.0.1 port, without persistence. The tests fail, not skip, without it.
type Server struct {
	t    *testing.T
	port int
	p    *childproc.Proc // nil while stopped
}

// Start launches a redis-server on a free port and waits until it answers PING.
func Start(t *testing.T) *Server {
	t.Helper()
	_, err := exec.LookPath("redis-server")
	require.NoError(t, err, "redis-server is needed (scripts/setup.sh redis installs it)")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	r := &Server{t: t, port: port}
	r.Start()
	t.Cleanup(r.Stop)
	return r
}

// URL is the server's redis:// address.
func (r *Server) URL() string { return fmt.Sprintf("redis://127.0.0.1:%d", r.port) }

// Start launches the server (again) on its port and waits until it answers.
func (r *Server) Start() {
	r.t.Helper()
	p, err := childproc.Start("redis-server", Args(r.port), childproc.Options{})
	require.NoError(r.t, err)
	r.p = p
	err = childproc.WaitFor(context.Background(), p, 10*time.Second, 10*time.Millisecond,
		fmt.Sprintf("redis-server on port %d", r.port), func() bool { return r.ping() == nil })
	require.NoError(r.t, err)
}

// Args are redis-server's flags for a server on 127.0.0.1:port without persistence.
func Args(port int) []string {
	return []string{"--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--loglevel", "warning"}
}

// Stop kills the server (SIGKILL: no goodbye to its clients). Idempotent.
func (r *Server) Stop() {
	r.p.Kill()
	r.p = nil
}

// Command sends one command and returns its reply: a status or integer line as is ("+OK",
// ":3"), a bulk string's body, or an array's bulk elements joined by ",".
func (r *Server) Command(args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", r.port), time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	fmt.Fprintf(c, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(c, "$%d\r\n%s\r\n", len(a), a)
	}
	return readReply(bufio.NewReader(c))
}

func readReply(br *bufio.Reader) (string, error) {
	line, err := br.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	var n int
	switch {
	case strings.HasPrefix(line, "$") && line != "$-1":
		fmt.Sscanf(line[1:], "%d", &n)
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(br, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	case strings.HasPrefix(line, "*"):
		fmt.Sscanf(line[1:], "%d", &n)
		var parts []string
		for range n {
			p, err := readReply(br)
			if err != nil {
				return "", err
			}
			parts = append(parts, p)
		}
		return strings.Join(parts, ","), nil
	}
	return line, nil
}

func (r *Server) ping() error {
	s, err := r.Command("PING")
	if err == nil && s != "+PONG" {
		err = fmt.Errorf("PING answered %q", s)
	}
	return err
}

// CommandCalls returns how many times Redis ran cmd (INFO commandstats).
func (r *Server) CommandCalls(cmd string) int {
	r.t.Helper()
	s, err := r.Command("INFO", "commandstats")
	require.NoError(r.t, err)
	for _, line := range strings.Split(s, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls="); ok {
			var n int
			fmt.Sscanf(rest, "%d", &n)
			return n
		}
	}
	return 0
}
