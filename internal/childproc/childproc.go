// Package childproc starts and stops the child processes of the benchmarks and the tests
// (gateways, mockllm replicas, redis-server), all alike: each dies with this process
// (Pdeathsig, so nothing is left behind on a shared machine), writes its output to a log
// file, and stops with SIGTERM and then, after a grace period, SIGKILL.
//
// # Concurrency and ownership
//
// A Proc owns one goroutine, which waits for the child's exit and closes Exited; it ends
// when the child does, and Stop and Kill return only after it has. A Proc is safe for
// concurrent use.
package childproc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Options say how a child is started. The zero value runs it in this process's working
// directory with its output discarded.
type Options struct {
	// Dir is the child's working directory; "" is this process's.
	Dir string
	// LogPath receives the child's stdout and stderr (created or truncated); "" discards
	// them.
	LogPath string
	// ExtraEnv ("KEY=value" each) is added to the environment the child inherits; an
	// entry overrides an inherited one of the same key.
	ExtraEnv []string
	// Group starts the child in a process group of its own, and Stop and Kill signal
	// the whole group: for children that start children of their own (a vLLM API
	// server and its engine-core process), which must not outlive them.
	Group bool
}

// Proc is a running (or exited) child process.
type Proc struct {
	cmd     *exec.Cmd
	group   bool
	logPath string
	exited  chan struct{}
	waitErr error // set before exited is closed
}

// Start starts bin with args. The child is killed if this process dies.
func Start(bin string, args []string, opts Options) (*Proc, error) {
	cmd := exec.Command(bin, args...)
	cmd.Dir = opts.Dir
	if opts.LogPath != "" {
		logf, err := os.Create(opts.LogPath)
		if err != nil {
			return nil, err
		}
		defer logf.Close() // the child holds its own descriptor
		cmd.Stdout, cmd.Stderr = logf, logf
	}
	if len(opts.ExtraEnv) > 0 {
		// exec uses the last value of a repeated key.
		cmd.Env = append(cmd.Environ(), opts.ExtraEnv...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: opts.Group}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &Proc{cmd: cmd, group: opts.Group, logPath: opts.LogPath, exited: make(chan struct{})}
	go func() { p.waitErr = cmd.Wait(); close(p.exited) }()
	return p, nil
}

// Pid is the child's process id, for reading its /proc entries (a benchmark's CPU time).
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Exited is closed once the child has exited.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// Alive reports whether the child is still running.
func (p *Proc) Alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Err is the child's exit error (see exec.Cmd.Wait); nil while it runs or after a clean exit.
func (p *Proc) Err() error {
	if p.Alive() {
		return nil
	}
	return p.waitErr
}

// Kill sends SIGKILL and waits for the exit. Idempotent; a nil Proc is a no-op.
func (p *Proc) Kill() {
	if p == nil {
		return
	}
	if !p.Alive() {
		p.reapGroup()
		return
	}
	p.signal(syscall.SIGKILL)
	<-p.exited
}

// reapGroup kills what is left of the group of a child that has exited on its own. The
// group's id cannot be another process's while any member of it lives.
func (p *Proc) reapGroup() {
	if p.group {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	}
}

// signal sends sig to the child, or to its whole process group when it has one.
func (p *Proc) signal(sig syscall.Signal) {
	if p.group {
		_ = syscall.Kill(-p.cmd.Process.Pid, sig)
		return
	}
	_ = p.cmd.Process.Signal(sig)
}

// Stop sends SIGTERM and waits up to grace for the exit, then kills the child. It reports a
// child that had to be killed or that exited with a non-zero status. Idempotent: a child
// that has already exited is not reported again.
func (p *Proc) Stop(grace time.Duration) error {
	if !p.Alive() {
		p.reapGroup()
		return nil
	}
	p.signal(syscall.SIGTERM)
	if p.group {
		// What the leader left of its group (it was told to stop them) goes with it.
		defer p.signal(syscall.SIGKILL)
	}
	select {
	case <-p.exited:
	case <-time.After(grace):
		p.signal(syscall.SIGKILL)
		<-p.exited
		return fmt.Errorf("%s did not exit within %s of SIGTERM; killed", p.name(), grace)
	}
	var ee *exec.ExitError
	if errors.As(p.waitErr, &ee) && ee.ExitCode() != 0 {
		return fmt.Errorf("%s exited with %v%s", p.name(), p.waitErr, p.seeLog())
	}
	return nil
}

// Tail returns the last n lines of the child's log, or "" without one.
func (p *Proc) Tail(n int) string {
	if p.logPath == "" {
		return ""
	}
	return Tail(p.logPath, n)
}

func (p *Proc) name() string { return p.cmd.Path }

func (p *Proc) seeLog() string {
	if p.logPath == "" {
		return ""
	}
	return "; see " + p.logPath
}

// WaitFor polls ok every interval until it holds, p exits (p may be nil), ctx ends or limit
// passes; what names the child in the errors.
func WaitFor(ctx context.Context, p *Proc, limit, interval time.Duration, what string, ok func() bool) error {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	for !ok() {
		var exited <-chan struct{}
		if p != nil {
			exited = p.exited
		}
		select {
		case <-exited:
			return fmt.Errorf("%s: process exited", what)
		case <-deadline.C:
			return fmt.Errorf("%s: not ready after %s", what, limit)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
	return nil
}

// HTTPOK reports whether a GET of url answers 200.
func HTTPOK(ctx context.Context, c *http.Client, url string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := c.Do(req)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// FreeAddr returns a 127.0.0.1 address with a port that was free a moment ago, for a child
// that takes its address as a flag.
func FreeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr, nil
}

// Tail returns the last n lines of the file at path (or the error reading it).
func Tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
