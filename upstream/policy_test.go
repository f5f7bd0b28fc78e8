package upstream

import (
	"errors"
	"fmt"
	"strings"
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

// fakeClock is a manual clock for policies and admitters that read time.
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

func TestDefaultPolicyConfigIsValid(t *testing.T) {
	require.NoError(t, DefaultPolicyConfig().Validate())
	require.NoError(t, DefaultAdmissionConfig().Validate())
}

func TestPolicyConfigValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*PolicyConfig)
		want   []string // substrings, one per expected error
	}{
		{"unknown name", func(c *PolicyConfig) { c.Name = "fastest" },
			[]string{`policy.name: unknown policy "fastest"`}},
		{"empty name", func(c *PolicyConfig) { c.Name = "" },
			[]string{`policy.name: unknown policy ""`}},
		{"imbalance count", func(c *PolicyConfig) { c.PrefixCache.ImbalanceCount = 0 },
			[]string{"policy.prefix_cache.imbalance_count: must be >= 1, got 0"}},
		{"block chars and index", func(c *PolicyConfig) { c.PrefixCache.BlockChars = 0; c.PrefixCache.IndexBlocks = -1 },
			[]string{"policy.prefix_cache.block_chars: must be >= 1, got 0", "policy.prefix_cache.index_blocks"}},
		{"load factor", func(c *PolicyConfig) { c.PrefixCache.LoadFactor = -1 },
			[]string{"policy.prefix_cache.load_factor"}},
		{"lmetric variant", func(c *PolicyConfig) { c.LMetric.Variant = "sticky-ish" },
			[]string{`policy.lmetric.variant: must be "", "sticky" or "unified", got "sticky-ish"`}},
		{"lmetric ratios", func(c *PolicyConfig) { c.LMetric.AffinityMinHitRatio = 1.5; c.LMetric.OverloadFactor = 0 },
			[]string{"policy.lmetric.affinity_min_hit_ratio", "policy.lmetric.overload_factor"}},
		{"lmetric sessions", func(c *PolicyConfig) { c.LMetric.MaxSessions = 0 },
			[]string{"policy.lmetric.max_sessions"}},
		{"weighted unknown scorer", func(c *PolicyConfig) { c.Weighted.Scorers = map[string]float64{"latency": 1, "queue-depth": 1} },
			[]string{"policy.weighted.scorers.latency: unknown scorer"}},
		{"weighted negative weight", func(c *PolicyConfig) { c.Weighted.Scorers = map[string]float64{"queue-depth": -1, "kv-utilization": 1} },
			[]string{"policy.weighted.scorers.queue-depth: weight must be a finite number >= 0, got -1"}},
		{"weighted all zero", func(c *PolicyConfig) { c.Weighted.Scorers = map[string]float64{"queue-depth": 0} },
			[]string{"policy.weighted.scorers: need at least one scorer with weight > 0"}},
		{"weighted empty map", func(c *PolicyConfig) { c.Weighted.Scorers = map[string]float64{} },
			[]string{"policy.weighted.scorers: need at least one scorer with weight > 0"}},
		{"vtc fields", func(c *PolicyConfig) {
			c.VTC.Window = 0
			c.VTC.OutputTokenWeight = -2
			c.VTC.MaxTokens = 10
			c.VTC.MaxReplicaLoad = 0
		}, []string{"policy.vtc.window", "policy.vtc.output_token_weight", "policy.vtc.max_tokens", "policy.vtc.max_replica_load"}},
		{"trace", func(c *PolicyConfig) { c.Trace.TopK = 0; c.Trace.Capacity = 0 },
			[]string{"policy.trace.top_k", "policy.trace.capacity"}},
		{"every error at once", func(c *PolicyConfig) {
			c.Name = "x"
			c.PrefixCache.ImbalanceCount = 0
			c.LMetric.BlockChars = 0
			c.VTC.MinTokens = 0
		}, []string{"policy.name", "policy.prefix_cache.imbalance_count", "policy.lmetric.block_chars", "policy.vtc.min_tokens"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultPolicyConfig()
			tt.mutate(&cfg)
			err := cfg.Validate()
			require.Error(t, err)
			lines := strings.Split(err.Error(), "\n")
			require.Len(t, lines, len(tt.want), "errors: %v", err)
			for i, w := range tt.want {
				require.Contains(t, lines[i], w)
			}
			_, err = NewPicker(cfg)
			require.Error(t, err)
		})
	}
}

func TestPolicyConfigValidateAt(t *testing.T) {
	cfg := DefaultPolicyConfig()
	cfg.PrefixCache.ImbalanceCount = 0
	require.EqualError(t, cfg.ValidateAt("pools.slow.policy"),
		"pools.slow.policy.prefix_cache.imbalance_count: must be >= 1, got 0")
}

func TestNewPicker(t *testing.T) {
	want := map[string]any{
		PolicyLeastRequest: (*LeastRequest)(nil),
		PolicyPrefixCache:  (*PrefixCache)(nil),
		PolicyLMetric:      (*LMetric)(nil),
		PolicyWeighted:     (*Weighted)(nil),
		PolicyVTCBasic:     (*VTCBasic)(nil),
		PolicyRoundRobin:   (*RoundRobin)(nil),
		PolicyRandom:       (*Random)(nil),
	}
	require.ElementsMatch(t, PolicyNames(), func() []string {
		var names []string
		for n := range want {
			names = append(names, n)
		}
		return names
	}())
	for _, name := range PolicyNames() {
		t.Run(name, func(t *testing.T) {
			cfg := DefaultPolicyConfig()
			cfg.Name = name
			p, err := NewPicker(cfg)
			require.NoError(t, err)
			require.IsType(t, want[name], p)
			require.Nil(t, p.(Traceable).Tracer(), "tracing is off by default")

			cs := cands(3, 1, 2)
			i := p.Pick(&Request{Prompt: "hello", InputTokens: 2, User: "u", Session: "s"}, cs)
			require.GreaterOrEqual(t, i, 0)
			require.Less(t, i, len(cs))

			cfg.Trace.Enabled = true
			p, err = NewPicker(cfg)
			require.NoError(t, err)
			p.Pick(&Request{Prompt: "hello", InputTokens: 2}, cs)
			require.Len(t, p.(Traceable).Tracer().Recent(10), 1)
		})
	}
	t.Run("unknown", func(t *testing.T) {
		cfg := DefaultPolicyConfig()
		cfg.Name = "least-loaded"
		_, err := NewPicker(cfg)
		require.ErrorContains(t, err, `policy.name: unknown policy "least-loaded" (want one of least-request, lmetric, prefix-cache, random, round-robin, vtc-basic, weighted)`)
	})
}

func TestFinishers(t *testing.T) {
	for _, name := range PolicyNames() {
		cfg := DefaultPolicyConfig()
		cfg.Name = name
		p, err := NewPicker(cfg)
		require.NoError(t, err)
		_, ok := p.(Finisher)
		require.Equal(t, name == PolicyLMetric || name == PolicyVTCBasic, ok, name)
	}
}

// TestPickConcurrent runs every policy from many goroutines; with -race it
// checks the locking, and it checks every answer is a valid index.
func TestPickConcurrent(t *testing.T) {
	for _, name := range PolicyNames() {
		t.Run(name, func(t *testing.T) {
			cfg := DefaultPolicyConfig()
			cfg.Name = name
			cfg.LMetric.Variant = LMetricUnified
			cfg.Trace.Enabled = true
			p, err := NewPicker(cfg)
			require.NoError(t, err)
			fin, _ := p.(Finisher)

			var wg sync.WaitGroup
			errs := make(chan error, 8)
			for g := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 200 {
						cs := cands(i%5, (i+g)%3, 2, g)[:1+(i+g)%4]
						req := &Request{
							Prompt:      strings.Repeat("system prompt ", 20) + fmt.Sprint(i%7),
							InputTokens: 70, User: fmt.Sprint("u", g%3), Session: fmt.Sprint("s", i%5),
						}
						k := p.Pick(req, cs)
						if k < 0 || k >= len(cs) {
							errs <- fmt.Errorf("pick %d out of range for %d candidates", k, len(cs))
							return
						}
						if fin != nil {
							fin.Done(req, cs[k].ID, 10)
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			require.Len(t, p.(Traceable).Tracer().Recent(5), 5)
		})
	}
}

// BenchmarkPick measures one decision over 8 candidates for every policy,
// with prompts that share system-prompt prefixes as chat traffic does.
func BenchmarkPick(b *testing.B) {
	const nPrompts = 64
	reqs := make([]*Request, nPrompts)
	for i := range reqs {
		system := strings.Repeat(fmt.Sprintf("You are assistant %d. Answer briefly. ", i%8), 24) // ~1 KB shared
		prompt := system + fmt.Sprintf("user question number %d about topic %d", i, i*7)
		reqs[i] = &Request{Prompt: prompt, InputTokens: len(prompt) / 4, User: fmt.Sprint("user", i%5), Session: fmt.Sprint("s", i%16)}
	}
	cs := cands(3, 0, 7, 2, 2, 5, 1, 4)
	for i := range cs {
		cs[i].Waiting = i % 3
		cs[i].KVUtilization = float64(i) / 10
	}
	for _, name := range PolicyNames() {
		b.Run(name, func(b *testing.B) {
			cfg := DefaultPolicyConfig()
			cfg.Name = name
			p, err := NewPicker(cfg)
			require.NoError(b, err)
			fin, _ := p.(Finisher)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				req := reqs[i%nPrompts]
				k := p.Pick(req, cs)
				if fin != nil {
					fin.Done(req, cs[k].ID, 16)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/pick")
		})
	}
}

func TestErrorsWrapRejected(t *testing.T) {
	for _, err := range []error{errRejectAll, errBucketEmpty, errBucketTooSmall} {
		require.True(t, errors.Is(err, ErrRejected), err.Error())
	}
}
