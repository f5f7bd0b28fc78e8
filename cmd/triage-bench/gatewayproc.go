package main

import (
	"bufio"
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

	"github.com/triage-gw/triage/bench/load"
	"github.com/triage-gw/triage/bench/promtext"
)

// gatewayProc is a gateway subprocess.
type gatewayProc struct {
	cmd     *exec.Cmd
	base    string // http://127.0.0.1:port
	logPath string
	startup time.Duration
	exited  chan struct{}
	waitErr error
	client  *http.Client // for readiness, metrics and idleness probes
}

// startGateway starts the gateway on a free 127.0.0.1 port with configPath
// (none: built-in defaults with the simulated pools, --simulate) and waits for /readyz.
func startGateway(ctx context.Context, c *gatewayConfig, configPath, logPath string) (*gatewayProc, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	args := []string{"--listen", addr}
	if configPath != "" {
		args = append(args, "--config", configPath)
	} else {
		args = append(args, "--simulate")
	}
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child holds its own descriptor
	cmd := exec.Command(c.Bin, args...)
	cmd.Dir = c.Workdir
	cmd.Stdout, cmd.Stderr = logf, logf
	// If this process dies, the gateway goes with it: no leftovers on a shared machine.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", c.Bin, err)
	}
	g := &gatewayProc{cmd: cmd, base: "http://" + addr, logPath: logPath, exited: make(chan struct{}),
		client: load.NewClient(4, 5*time.Second)}
	go func() { g.waitErr = cmd.Wait(); close(g.exited) }()

	deadline := time.NewTimer(c.StartupTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			g.stop()
			return nil, ctx.Err()
		case <-g.exited:
			return nil, fmt.Errorf("gateway exited before ready (%v); last log lines:\n%s", g.waitErr, tail(logPath, 20))
		case <-deadline.C:
			g.stop()
			return nil, fmt.Errorf("gateway not ready after %s; last log lines:\n%s", c.StartupTimeout, tail(logPath, 20))
		case <-tick.C:
			if g.ready(ctx) {
				g.startup = time.Since(start)
				return g, nil
			}
		}
	}
}

func (g *gatewayProc) ready(ctx context.Context) bool {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g.base+"/readyz", nil)
	resp, err := g.client.Do(req)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func (g *gatewayProc) alive() bool {
	select {
	case <-g.exited:
		return false
	default:
		return true
	}
}

// metrics scrapes the gateway's /metrics.
func (g *gatewayProc) metrics(ctx context.Context) (promtext.Samples, error) {
	return promtext.Scrape(ctx, g.client, g.base+"/metrics")
}

// pollMetrics scrapes the gateway's /metrics every interval until stop is
// called (see promtext.Poll).
func (g *gatewayProc) pollMetrics(ctx context.Context, interval time.Duration, record func(since time.Duration, m promtext.Samples)) (stop func()) {
	return promtext.Poll(ctx, g.client, g.base+"/metrics", interval, record)
}

// waitIdle waits until the gateway reports no request in flight but the
// scrape itself, so one scenario's stragglers do not load the next.
func (g *gatewayProc) waitIdle(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		m, err := g.metrics(ctx)
		if err == nil && m.Get("triage_inflight_requests") <= 1 {
			return nil
		}
		if !g.alive() {
			return fmt.Errorf("gateway exited; see %s", g.logPath)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("gateway still busy after %s (last scrape error: %v)", limit, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// stop sends SIGTERM, waits up to 20 s for a graceful exit, then kills.
func (g *gatewayProc) stop() error {
	if !g.alive() {
		return nil
	}
	g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-g.exited:
	case <-time.After(20 * time.Second):
		g.cmd.Process.Kill()
		<-g.exited
		return errors.New("gateway did not exit within 20s of SIGTERM; killed")
	}
	var ee *exec.ExitError
	if errors.As(g.waitErr, &ee) && ee.ExitCode() != 0 {
		return fmt.Errorf("gateway exited with %v; see %s", g.waitErr, g.logPath)
	}
	return nil
}

// helloProc is the baseline server, a separate process like the gateway.
type helloProc struct {
	cmd    *exec.Cmd
	base   string
	exited chan struct{}
}

// startHello runs "triage-bench hello" (this binary) on a free port.
func startHello() (*helloProc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, "hello", "--listen", "127.0.0.1:0", "--max-lifetime", "10m")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	h := &helloProc{cmd: cmd, exited: make(chan struct{})}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "listening "); ok {
				select {
				case addr <- a:
				default:
				}
			}
		}
	}()
	go func() { cmd.Wait(); close(h.exited) }()
	select {
	case a := <-addr:
		h.base = "http://" + a
		return h, nil
	case <-h.exited:
		return nil, errors.New("hello server exited at start")
	case <-time.After(10 * time.Second):
		h.stop()
		return nil, errors.New("hello server did not start within 10s")
	}
}

func (h *helloProc) stop() {
	select {
	case <-h.exited:
		return
	default:
	}
	h.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-h.exited:
	case <-time.After(5 * time.Second):
		h.cmd.Process.Kill()
		<-h.exited
	}
}

// freeAddr returns a 127.0.0.1 address with a port that was free a moment
// ago (the gateway takes its address as a flag).
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr, nil
}

// tail returns the last n lines of the file at path.
func tail(path string, n int) string {
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
