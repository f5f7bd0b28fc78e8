package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// root is the repository root; the tests run in deploy/.
var root = func() string {
	wd, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	return filepath.Dir(wd)
}()

// path joins rel (slash-separated, from the repository root) onto root.
func path(rel string) string { return filepath.Join(root, filepath.FromSlash(rel)) }

var binDir string // set by TestMain, filled by buildBinaries

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "triage-deploy-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

var (
	buildOnce sync.Once
	buildErr  error
)

// binaries builds cmd/triage and cmd/mockllm from this tree (once per run) and returns their
// paths. It uses the same flags as `make build`, so after a build the go build cache makes
// this a link step; CGO_LDFLAGS gains .deps/tokenizers as the Makefile sets it.
func binaries(t *testing.T) (triage, mockllm string) {
	t.Helper()
	buildOnce.Do(func() {
		ldflags := strings.TrimSpace(os.Getenv("CGO_LDFLAGS") + " -L" + path(".deps/tokenizers"))
		cmd := exec.Command("go", "build", "-o", binDir+string(filepath.Separator), "./cmd/triage", "./cmd/mockllm")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1", "CGO_LDFLAGS="+ldflags)
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build ./cmd/triage ./cmd/mockllm: %w\n%s", err, out)
		}
	})
	require.NoError(t, buildErr)
	return filepath.Join(binDir, "triage"), filepath.Join(binDir, "mockllm")
}

// tool returns the path of an external program the checks need, failing (not skipping) the
// test when it is missing: CI installs it with `scripts/setup.sh prom`.
func tool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	require.NoError(t, err, "%s is not installed: run `scripts/setup.sh prom` (Debian package prometheus; `make test` does it)", name)
	return p
}

// proc is a program the test started. Its output is kept for failure reports; lines are
// also offered to watch.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  lineLog
	done chan struct{} // closed when the process has exited
	err  error         // the exit status, valid after done
}

// lineLog keeps a process' output and hands each complete line to watch.
type lineLog struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	part  []byte
	watch func(line string)
}

func (l *lineLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	l.part = append(l.part, p...)
	for {
		i := bytes.IndexByte(l.part, '\n')
		if i < 0 {
			break
		}
		line := string(l.part[:i])
		l.part = l.part[i+1:]
		if l.watch != nil {
			l.watch(line)
		}
	}
	return len(p), nil
}

func (l *lineLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// start runs bin with args in dir under env (nil: none but PATH and HOME). watch, if set,
// sees every output line. The process is stopped in t.Cleanup with SIGTERM, then SIGKILL
// after 10 s; if the test failed, the tail of its output is logged.
func start(t *testing.T, name, dir string, env []string, watch func(string), bin string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, cmd: exec.Command(bin, args...), done: make(chan struct{})}
	p.out.watch = watch
	p.cmd.Dir = dir
	p.cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}, env...)
	p.cmd.Stdout = &p.out
	p.cmd.Stderr = &p.out
	require.NoError(t, p.cmd.Start(), "start %s", name)
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			out := p.out.String()
			if len(out) > 6000 {
				out = "..." + out[len(out)-6000:]
			}
			t.Logf("--- %s output (exit: %v) ---\n%s", name, p.err, out)
		}
	})
	return p
}

func (p *proc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// listenAddr starts a watcher for the JSON log line whose msg is msg and returns a channel
// receiving its "addr" field once.
func listenAddr(msg string) (func(string), <-chan string) {
	ch := make(chan string, 1)
	var once sync.Once
	return func(line string) {
		var rec struct {
			Msg  string `json:"msg"`
			Addr string `json:"addr"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == msg && rec.Addr != "" {
			once.Do(func() { ch <- rec.Addr })
		}
	}, ch
}

// awaitAddr waits for the address a process reports, or for its exit.
func awaitAddr(t *testing.T, p *proc, ch <-chan string, timeout time.Duration) string {
	t.Helper()
	select {
	case addr := <-ch:
		return addr
	case <-p.done:
		t.Fatalf("%s exited before listening: %v\n%s", p.name, p.err, p.out.String())
	case <-time.After(timeout):
		t.Fatalf("%s did not report its address within %s\n%s", p.name, timeout, p.out.String())
	}
	return ""
}

// freePort returns a 127.0.0.1 port that was free a moment ago, for programs that cannot
// report the port they bound (Prometheus).
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	return port
}

// poll calls check every interval until it returns nil, the deadline passes (the last error
// is returned) or p exits. It waits on external processes, which offer no channel to wait on.
func poll(ctx context.Context, p *proc, interval time.Duration, check func() error) error {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		err := check()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-p.done:
			return fmt.Errorf("%s exited: %v (last: %v)", p.name, p.err, err)
		case <-tick.C:
		}
	}
}

var client = &http.Client{Timeout: 10 * time.Second}

// get returns the body of a 200 answer to GET url.
func get(url string) (string, error) {
	resp, err := client.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s: %.300s", url, resp.Status, b)
	}
	return string(b), nil
}

// post sends body as JSON and returns the response with its body read.
func post(t *testing.T, url, body string) (*http.Response, string) {
	t.Helper()
	resp, err := client.Post(url, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(b)
}

var errNotFound = errors.New("not found")
