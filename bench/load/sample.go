package load

import (
	"net/http"
	"strconv"
	"time"
)

// Sample is one request as a client saw it.
type Sample struct {
	At      time.Duration // send time, from the start of the run
	Latency time.Duration // send → body read to its end
	Status  int           // 0 when the request failed without a response
	Err     string
	Header  http.Header
	Body    []byte // only when the caller asked for it
}

// OK reports whether the request got a 200 and was read without error.
func (s Sample) OK() bool { return s.Status == http.StatusOK && s.Err == "" }

// StatusCounts counts samples by status code; failures without a response
// count under "error".
func StatusCounts(ss []Sample) map[string]int {
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

// Latencies returns the latencies of the samples keep accepts, in order.
func Latencies(ss []Sample, keep func(Sample) bool) []time.Duration {
	var out []time.Duration
	for _, s := range ss {
		if keep(s) {
			out = append(out, s.Latency)
		}
	}
	return out
}

// FirstError returns the first failure's description ("status 429" for an
// answer other than 200), or "" when every sample is OK.
func FirstError(ss []Sample) string {
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

// HeaderMillis parses a header holding milliseconds ("0.734"); ok is
// false when it is absent or not a number.
func HeaderMillis(h http.Header, name string) (float64, bool) {
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
