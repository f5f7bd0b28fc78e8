package main

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// newClient returns an HTTP/1.1 keep-alive client that holds up to conns
// idle connections per host, so a closed loop of conns workers never
// re-dials. timeout bounds each request, body included.
func newClient(conns int, timeout time.Duration) *http.Client {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        0,
		MaxIdleConnsPerHost: max(conns, 2),
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
		Proxy:               nil, // benchmarks talk to 127.0.0.1 only, never via a proxy
	}
	return &http.Client{Transport: tr, Timeout: timeout}
}

// Sample is one request as a client saw it.
type Sample struct {
	At      time.Duration // send time, from the start of the scenario
	Latency time.Duration // send → body read to its end
	Status  int           // 0 when the request failed without a response
	Err     string
	Header  http.Header
	Body    []byte // only when the caller asked for it
}

// postJSON sends body to url and reads the answer to its end. keepBody
// returns the body in the Sample; otherwise it is discarded.
func postJSON(ctx context.Context, c *http.Client, url string, body []byte, keepBody bool) Sample {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return Sample{Err: err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return Sample{Latency: time.Since(start), Err: err.Error()}
	}
	var b []byte
	if keepBody {
		b, err = io.ReadAll(resp.Body)
	} else {
		_, err = io.Copy(io.Discard, resp.Body)
	}
	resp.Body.Close()
	s := Sample{Latency: time.Since(start), Status: resp.StatusCode, Header: resp.Header, Body: b}
	if err != nil {
		s.Err = err.Error()
	}
	return s
}

// closedLoop runs workers that each send one request after another until
// d has passed, limit requests have started (0: no limit) or ctx ends.
// do sends request number seq (0-based, unique across workers) for worker
// w and returns its Sample; closedLoop fills in At. It returns the samples
// in send order and the wall time from start to the last answer.
func closedLoop(ctx context.Context, workers int, d time.Duration, limit int, do func(ctx context.Context, w int, seq int64) Sample) ([]Sample, time.Duration) {
	return rampedLoop(ctx, workers, 0, d, limit, do)
}

// rampedLoop is closedLoop with workers joining one by one: worker w
// starts w·ramp/workers after the start.
func rampedLoop(ctx context.Context, workers int, ramp, d time.Duration, limit int, do func(ctx context.Context, w int, seq int64) Sample) ([]Sample, time.Duration) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu  sync.Mutex
		out []Sample
		seq atomic.Int64
		wg  sync.WaitGroup
	)
	start := time.Now()
	stop := start.Add(d)
	for w := range workers {
		wg.Go(func() {
			var local []Sample
			if delay := ramp * time.Duration(w) / time.Duration(workers); delay > 0 {
				select {
				case <-ctx.Done():
				case <-time.After(delay):
				}
			}
			for ctx.Err() == nil && time.Now().Before(stop) {
				n := seq.Add(1) - 1
				if limit > 0 && n >= int64(limit) {
					break
				}
				at := time.Since(start)
				s := do(ctx, w, n)
				s.At = at
				local = append(local, s)
			}
			mu.Lock()
			out = append(out, local...)
			mu.Unlock()
		})
	}
	wg.Wait()
	sort.Slice(out, func(i, j int) bool { return out[i].At < out[j].At })
	return out, time.Since(start)
}

// openLoopResult is an open-loop run's outcome.
type openLoopResult struct {
	Samples []Sample
	Offered int // arrivals
	Dropped int // arrivals not sent because maxInFlight requests were outstanding
	Sent    time.Duration
	Wall    time.Duration // first arrival → last answer
}

// openLoop sends requests at Poisson arrivals of rate per second for d,
// whatever the server does (open loop), with at most maxInFlight
// outstanding: an arrival that finds that many is dropped on the client
// side and counted. After d it waits for the outstanding answers (each
// bounded by the client's timeout) or for ctx.
func openLoop(ctx context.Context, rate float64, d time.Duration, maxInFlight int, seed uint64, do func(ctx context.Context, seq int64) Sample) openLoopResult {
	rng := rand.New(rand.NewPCG(seed, 0x6f70656e))
	var (
		mu  sync.Mutex
		res openLoopResult
		wg  sync.WaitGroup
	)
	sem := make(chan struct{}, maxInFlight)
	start := time.Now()
	next := time.Duration(0)
	timer := time.NewTimer(0)
	<-timer.C
loop:
	for seq := int64(0); ; seq++ {
		next += time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
		if next > d {
			break
		}
		if wait := time.Until(start.Add(next)); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-ctx.Done():
				timer.Stop()
				break loop
			}
		}
		res.Offered++
		select {
		case sem <- struct{}{}:
		default:
			res.Dropped++
			continue
		}
		at := time.Since(start)
		wg.Go(func() {
			defer func() { <-sem }()
			s := do(ctx, seq)
			s.At = at
			mu.Lock()
			res.Samples = append(res.Samples, s)
			mu.Unlock()
		})
	}
	res.Sent = time.Since(start)
	wg.Wait()
	res.Wall = time.Since(start)
	sort.Slice(res.Samples, func(i, j int) bool { return res.Samples[i].At < res.Samples[j].At })
	return res
}

// statusCounts counts samples by status code; failures without a response
// count under "error".
func statusCounts(ss []Sample) map[string]int {
	m := map[string]int{}
	for _, s := range ss {
		if s.Status == 0 {
			m["error"]++
			continue
		}
		m[strconv.Itoa(s.Status)]++
	}
	return m
}

// latencies returns the latencies of the samples keep accepts.
func latencies(ss []Sample, keep func(Sample) bool) []time.Duration {
	var out []time.Duration
	for _, s := range ss {
		if keep(s) {
			out = append(out, s.Latency)
		}
	}
	return out
}

func isOK(s Sample) bool { return s.Status == http.StatusOK && s.Err == "" }

// firstError returns the first failure's description, or "".
func firstError(ss []Sample) string {
	for _, s := range ss {
		if s.Err != "" {
			return s.Err
		}
		if s.Status != http.StatusOK && s.Status != 0 {
			return "status " + strconv.Itoa(s.Status)
		}
	}
	return ""
}

// headerMillis parses a header holding milliseconds ("0.734"); ok is
// false when it is absent or not a number.
func headerMillis(h http.Header, name string) (float64, bool) {
	v := h.Get(name)
	if v == "" {
		return 0, false
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return 0, false
	}
	return f, true
}
