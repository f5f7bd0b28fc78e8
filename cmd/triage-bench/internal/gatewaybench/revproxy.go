package gatewaybench

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"

	"github.com/triage-gw/triage/internal/childproc"
)

// RunRevProxy serves a plain net/http/httputil.ReverseProxy in front of --target until ctx
// ends: the baseline of the side-by-side scenario, what any Go proxy costs without routing.
// It is tuned only as far as a fair comparison needs: idle connections to the target for
// every client (the default transport keeps 2, so 16 clients would re-dial) and SSE flushed
// event by event, as the gateway does. It prints "listening <addr>" on stderr once bound.
func RunRevProxy(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("triage-bench revproxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:0", "address to serve on (127.0.0.1 only for benchmarks)")
	target := fs.String("target", "", "base URL every request is forwarded to, e.g. http://127.0.0.1:9001 (required)")
	limit := fs.Duration("max-lifetime", 10*time.Minute, "exit after this long even if nobody stops the server (a guard against leftovers)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: triage-bench revproxy --target URL [flags]\n\nServes Go's httputil.ReverseProxy in front of one target: the plain-proxy baseline of the side-by-side scenario.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	u, err := url.Parse(*target)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return fmt.Errorf("revproxy: --target must be an http:// URL with a host, got %q", *target)
	}
	return serveUntil(ctx, *listen, *limit, newRevProxy(u), stderr)
}

// newRevProxy is the proxy RunRevProxy serves: every request to target, its path kept.
func newRevProxy(target *url.URL) *httputil.ReverseProxy {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 256
	tr.Proxy = nil
	return &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(target) },
		Transport:     tr,
		FlushInterval: -1,
	}
}

// revProxyProc is the plain proxy, a separate process like the gateway, so its CPU time is
// read the same way.
type revProxyProc struct {
	p    *childproc.Proc
	base string
}

// startRevProxy runs "triage-bench revproxy" (this binary) in front of target on a free
// port and waits until a GET of target's /health through it answers 200.
func startRevProxy(ctx context.Context, target, logPath string) (*revProxyProc, error) {
	p, base, err := startSelf(ctx, "revproxy", "/health", childproc.Options{LogPath: logPath},
		"revproxy", "--target", target, "--max-lifetime", "15m")
	if err != nil {
		return nil, err
	}
	return &revProxyProc{p: p, base: base}, nil
}

func (r *revProxyProc) stop() { r.p.Stop(5 * time.Second) }
