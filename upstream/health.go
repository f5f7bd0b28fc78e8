package upstream

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
)

// checkOnce probes every replica once, concurrently, and folds the results
// into their health state. It returns when all probes have finished; each
// is bounded by HealthCheck.Timeout. A probe cut short because ctx ended
// (shutdown) is not counted.
func (p *Pool) checkOnce(ctx context.Context) {
	hc := p.cfg.HealthCheck
	var wg sync.WaitGroup
	for _, r := range p.replicas {
		wg.Go(func() {
			defer p.recoverPanic("health_check")
			err := p.probe(ctx, r)
			if ctx.Err() != nil {
				return
			}
			if r.recordCheck(err == nil, hc.UnhealthyAfter, hc.HealthyAfter) {
				if err != nil {
					p.log.Warn("replica failed health checks", "replica", r.id,
						"consecutive_failures", hc.UnhealthyAfter, "err", err)
				} else {
					p.log.Info("replica passed health checks", "replica", r.id)
				}
			}
			p.publish(r, r.available(p.now()))
		})
	}
	wg.Wait()
}

// probe GETs the health path; nil means a 2xx answer within the timeout.
func (p *Pool) probe(ctx context.Context, r *replica) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.HealthCheck.Timeout.Std())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.endpoint(p.cfg.HealthCheck.Path), nil)
	if err != nil {
		return err
	}
	for k, v := range r.headers {
		req.Header[k] = []string{v}
	}
	resp, err := p.transport.RoundTrip(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	// Read a little so the connection can be reused for the next probe.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("health check %s: status %d", p.cfg.HealthCheck.Path, resp.StatusCode)
	}
	return nil
}
