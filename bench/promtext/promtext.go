package promtext

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
)

// Samples is one scrape of a Prometheus text endpoint: each series ("name"
// or "name{labels}", labels as the server wrote them) to its value.
type Samples map[string]float64

// Scrape fetches url (a /metrics endpoint) and parses the text format. It
// reads at most 16 MiB of it.
func Scrape(ctx context.Context, c *http.Client, url string) (Samples, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, resp.Body)
		return nil, fmt.Errorf("scrape %s: status %d", url, resp.StatusCode)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, err
	}
	return Parse(b), nil
}

// Parse parses the Prometheus text exposition format, ignoring comments,
// timestamps and lines it cannot read.
func Parse(b []byte) Samples {
	out := Samples{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		// The series may hold spaces inside label values; the value follows the
		// closing brace, or the name when there are no labels.
		series, rest := line, ""
		if i := strings.LastIndexByte(line, '}'); i >= 0 {
			series, rest = line[:i+1], strings.TrimSpace(line[i+1:])
		} else if i := strings.IndexByte(line, ' '); i >= 0 {
			series, rest = line[:i], strings.TrimSpace(line[i+1:])
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		out[series] = v
	}
	return out
}

// Get returns a series' value, NaN when absent.
func (p Samples) Get(series string) float64 {
	if v, ok := p[series]; ok {
		return v
	}
	return math.NaN()
}

// Sum adds the values of every series of metric name (any labels), 0 when
// there is none.
func (p Samples) Sum(name string) float64 {
	var s float64
	for k, v := range p {
		if k == name || strings.HasPrefix(k, name+"{") {
			s += v
		}
	}
	return s
}
