package gatewaybench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/triage-gw/triage/bench/load"
	"github.com/triage-gw/triage/internal/childproc"
)

// helloBody is what the baseline server answers, about the size of a
// /v1/classify answer for one text.
var helloBody = []byte(`{"label":"0","p_slow":0.1234,"reason":"fast_model","cache":"hit"}` + "\n")

// RunHello serves a bare net/http hello world until ctx ends: the baseline
// that the gateway's HTTP path is compared with under the same client. It
// reads and discards the request body so POSTs cost what they cost the
// gateway. It prints "listening <addr>" on stderr once bound.
func RunHello(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("triage-bench hello", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:0", "address to serve on (127.0.0.1 only for benchmarks)")
	limit := fs.Duration("max-lifetime", 10*time.Minute, "exit after this long even if nobody stops the server (a guard against leftovers)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: triage-bench hello [flags]\n\nServes a bare net/http hello world: any method and path get a small JSON answer.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	return serveUntil(ctx, *listen, *limit, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Write(helloBody)
	}), stderr)
}

// serveUntil serves h on listen until ctx ends or limit passes, then shuts down, giving open
// requests 2 s. It prints "listening <addr>" on stderr once bound, for the parent process.
func serveUntil(ctx context.Context, listen string, limit time.Duration, h http.Handler, stderr io.Writer) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "listening %s\n", ln.Addr())
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer scancel()
	hs.Shutdown(sctx)
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// helloProc is the baseline server, a separate process like the gateway.
type helloProc struct {
	p    *childproc.Proc
	base string
}

// startHello runs "triage-bench hello" (this binary) on a free port and waits until it
// answers.
func startHello(ctx context.Context) (*helloProc, error) {
	p, base, err := startSelf(ctx, "hello server", "/", childproc.Options{}, "hello", "--max-lifetime", "10m")
	if err != nil {
		return nil, err
	}
	return &helloProc{p: p, base: base}, nil
}

// startSelf runs this binary with args plus --listen on a free port, and waits up to 10 s
// until a GET of health there answers 200. It returns the child and its base URL.
func startSelf(ctx context.Context, what, health string, opts childproc.Options, args ...string) (*childproc.Proc, string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, "", err
	}
	addr, err := childproc.FreeAddr()
	if err != nil {
		return nil, "", err
	}
	p, err := childproc.Start(self, append(args, "--listen", addr), opts)
	if err != nil {
		return nil, "", err
	}
	base := "http://" + addr
	client := load.NewClient(1, 2*time.Second)
	defer client.CloseIdleConnections()
	if err := childproc.WaitFor(ctx, p, 10*time.Second, 20*time.Millisecond, what,
		func() bool { return childproc.HTTPOK(ctx, client, base+health) }); err != nil {
		p.Stop(5 * time.Second)
		return nil, "", err
	}
	return p, base, nil
}

func (h *helloProc) stop() { h.p.Stop(5 * time.Second) }
