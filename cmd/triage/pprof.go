package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// pprofServer serves Go's runtime profiles (net/http/pprof, under /debug/pprof/) on a
// loopback address of its own, for profiling the gateway under load (--pprof). It runs as a
// backend: started before the gateway serves and stopped after it has drained, so a profile
// can cover a whole benchmark. It is off unless the flag names an address.
type pprofServer struct {
	ln  net.Listener
	srv *http.Server
}

// listenPprof binds addr, which must be a loopback address: the profiles show the
// process's code, memory and timing, which only this machine's operator should see.
func listenPprof(addr string) (*pprofServer, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("--pprof: %w", err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("--pprof: %q is not a loopback address (127.0.0.1:port, [::1]:port or localhost:port): the profiles are for this machine only", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--pprof: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return &pprofServer{ln: ln, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}, nil
}

// Addr is the address the profiles are served on.
func (p *pprofServer) Addr() net.Addr { return p.ln.Addr() }

// Run serves until ctx ends, then closes the server at once: a profile being taken is cut
// short rather than holding the shutdown for its remaining seconds.
func (p *pprofServer) Run(ctx context.Context) error {
	served := make(chan error, 1)
	go func() { served <- p.srv.Serve(p.ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("pprof: %w", err)
	case <-ctx.Done():
	}
	p.srv.Close()
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("pprof: %w", err)
	}
	return nil
}
