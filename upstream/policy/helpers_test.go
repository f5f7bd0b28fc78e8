package policy

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// cands builds candidates r0, r1, ... with the given InFlight counts.
func cands(inFlight ...int) []Candidate {
	out := make([]Candidate, len(inFlight))
	for i, n := range inFlight {
		out[i] = Candidate{ID: fmt.Sprintf("r%d", i), InFlight: n, Weight: 1, Fresh: true}
	}
	return out
}

// pickIDs runs n picks of req over cs and returns the chosen IDs.
func pickIDs(p Picker, req *Request, cs []Candidate, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = cs[p.Pick(req, cs)].ID
	}
	return out
}

// fakeClock is a manual clock for policies and tracers that read time.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// lastTrace returns the latest decision of a traced picker.
func lastTrace(t *testing.T, p Picker) TraceRecord {
	t.Helper()
	tp, ok := p.(Traceable)
	require.True(t, ok)
	recs := tp.Tracer().Recent(1)
	require.Len(t, recs, 1)
	return recs[0]
}

func withTracer[P interface{ SetTracer(*Tracer) }](p P) P {
	p.SetTracer(NewTracer(8, 16, nil))
	return p
}

// signalCands builds fresh candidates r0, r1, ... with the given InFlight
// counts, each given its signal by set(c, i).
func signalCands(inFlight []int, set func(c *Candidate, i int)) []Candidate {
	cs := cands(inFlight...)
	for i := range cs {
		set(&cs[i], i)
	}
	return cs
}
