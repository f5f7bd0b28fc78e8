// Package probe is the container health check of the gateway and mockllm images: a GET of
// a local health path, so the runtime image needs no curl (and none of its libraries).
package probe

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// Timeout bounds one probe: below the image HEALTHCHECK's own timeout (3 s).
const Timeout = 2 * time.Second

// URL is the address to probe for a server listening on listen: a wildcard or empty host
// becomes 127.0.0.1, since the probe runs beside the server.
func URL(listen, path string) (string, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", fmt.Errorf("listen address %q: %w", listen, err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + path, nil
}

// Check GETs url and returns nil when it answers 200 within Timeout.
func Check(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("health check: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("health check: GET %s: %s", url, resp.Status)
	}
	return nil
}
