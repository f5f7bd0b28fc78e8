package policy

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestNew(t *testing.T) {
	want := map[string]any{
		"least-request": (*LeastRequest)(nil),
		"prefix-cache":  (*PrefixCache)(nil),
		"lmetric":       (*LMetric)(nil),
		"weighted":      (*Weighted)(nil),
		"vtc-basic":     (*VTCBasic)(nil),
		"round-robin":   (*RoundRobin)(nil),
		"random":        (*Random)(nil),

		"least-kv-cache":    (*LeastKVCache)(nil),
		"least-gpu-cache":   (*LeastKVCache)(nil),
		"least-utilization": (*LeastUtilization)(nil),
		"least-busy-time":   (*LeastBusyTime)(nil),
		"throughput":        (*Throughput)(nil),
		"least-latency":     (*LeastLatency)(nil),

		"prefix-cache-preble": (*Preble)(nil),
		"slo":                 (*SLO)(nil),
		"slo-least-load":      (*SLO)(nil),
		"slo-pack-load":       (*SLO)(nil),
	}
	require.ElementsMatch(t, Names(), func() []string {
		var names []string
		for n := range want {
			names = append(names, n)
		}
		return names
	}())
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Name = name
			p, err := New(cfg, Env{})
			require.NoError(t, err)
			require.IsType(t, want[name], p)
			require.Nil(t, p.(Traceable).Tracer(), "tracing is off by default")

			cs := cands(3, 1, 2)
			i := p.Pick(&Request{Prompt: "hello", InputTokens: 2, User: "u", Session: "s"}, cs)
			require.GreaterOrEqual(t, i, 0)
			require.Less(t, i, len(cs))

			cfg.Trace.Enabled = true
			p, err = New(cfg, Env{})
			require.NoError(t, err)
			p.Pick(&Request{Prompt: "hello", InputTokens: 2}, cs)
			require.Len(t, p.(Traceable).Tracer().Recent(10), 1)
		})
	}
	t.Run("unknown", func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.Name = "least-loaded"
		_, err := New(cfg, Env{})
		require.ErrorContains(t, err, `policy.name: unknown policy "least-loaded" (want one of least-busy-time, least-gpu-cache, least-kv-cache, least-latency, least-request, least-utilization, lmetric, prefix-cache, prefix-cache-preble, random, round-robin, slo, slo-least-load, slo-pack-load, throughput, vtc-basic, weighted)`)
	})
}

func TestRegisterRefusesMistakes(t *testing.T) {
	build := func(noSettings, Env) (Picker, error) { return NewLeastRequest(), nil }
	require.PanicsWithValue(t, `policy: "least-request" registered twice`, func() { register("least-request", "", nil, build) })
	require.Panics(t, func() { register("", "", nil, build) })
	require.Panics(t, func() {
		register("other", "trace", DefaultLMetricConfig, func(LMetricConfig, Env) (Picker, error) { return nil, nil })
	}, "name and trace are Config's own keys")
	require.Panics(t, func() {
		register("other", "lmetric", DefaultLeastBusyTimeConfig, func(LeastBusyTimeConfig, Env) (Picker, error) { return nil, nil })
	}, "a section belongs to the policies of one config type")
	require.Panics(t, func() {
		register("other", "other", nil, func(LMetricConfig, Env) (Picker, error) { return nil, nil })
	}, "a section needs defaults")
	require.Panics(t, func() {
		register("other", "", DefaultLMetricConfig, func(LMetricConfig, Env) (Picker, error) { return nil, nil })
	})
	require.NotContains(t, Names(), "other", "a refused registration leaves no trace")
}

func TestNewInjectsTheClock(t *testing.T) {
	clock := newFakeClock()
	cfg := DefaultConfig()
	cfg.Name = "vtc-basic"
	cfg.Trace.Enabled = true
	p, err := New(cfg, Env{Now: clock.Now})
	require.NoError(t, err)
	vtc := p.(*VTCBasic)
	vtc.Pick(&Request{User: "u", InputTokens: 100}, cands(0, 0))
	require.Equal(t, 100.0, vtc.Usage("u"))
	require.Equal(t, clock.Now(), lastTrace(t, p).Time, "the tracer tells time with the same clock")
	clock.Advance(time.Minute)
	require.Zero(t, vtc.Usage("u"), "the window slides on the injected clock")
}

func TestFinishers(t *testing.T) {
	for _, name := range Names() {
		cfg := DefaultConfig()
		cfg.Name = name
		p, err := New(cfg, Env{})
		require.NoError(t, err)
		_, ok := p.(Finisher)
		require.Equal(t, name == "lmetric" || name == "vtc-basic" || name == "least-busy-time" || name == "prefix-cache-preble", ok, name)
	}
}

// TestPickConcurrent runs every policy from many goroutines; with -race it
// checks the locking, and it checks every answer is a valid index.
func TestPickConcurrent(t *testing.T) {
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Name = name
			update(&cfg, "lmetric", func(s *LMetricConfig) { s.Variant = LMetricUnified })
			update(&cfg, "slo", func(s *SLOConfig) { s.TTFTTarget, s.MinSamples = 4*time.Millisecond, 1 })
			cfg.Trace.Enabled = true
			p, err := New(cfg, Env{})
			require.NoError(t, err)
			fin, _ := p.(Finisher)
			obs, _ := p.(TTFTObserver)

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
						if obs != nil {
							obs.ObserveTTFT(req, cs[k].ID, cs[k].InFlight, time.Duration(i%9)*time.Millisecond)
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
	for _, name := range Names() {
		b.Run(name, func(b *testing.B) {
			cfg := DefaultConfig()
			cfg.Name = name
			p, err := New(cfg, Env{})
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

// TestEveryClientKeyedTableReportsEvictions: the tables a policy keeps per client-chosen
// value (users, sessions, prompt blocks) stay within their bound however many distinct values
// clients send, and New wires each policy's evictions to Env.Evicted.
func TestEveryClientKeyedTableReportsEvictions(t *testing.T) {
	for _, tc := range []struct {
		name, table string
		set         func(*Config) error
	}{
		{"vtc-basic", TableUsers, func(c *Config) error {
			v := SectionOf[VTCConfig](*c, "vtc")
			v.MaxUsers = 8
			return c.SetSection("vtc", v)
		}},
		{"lmetric", TableSessions, func(c *Config) error {
			v := SectionOf[LMetricConfig](*c, "lmetric")
			v.Variant, v.MaxSessions = LMetricSticky, 8
			return c.SetSection("lmetric", v)
		}},
		{"lmetric", TablePrefixBlocks, func(c *Config) error {
			v := SectionOf[LMetricConfig](*c, "lmetric")
			v.IndexBlocks, v.BlockChars = 8, 4
			return c.SetSection("lmetric", v)
		}},
		{"prefix-cache", TablePrefixBlocks, func(c *Config) error {
			v := SectionOf[PrefixCacheConfig](*c, "prefix_cache")
			v.IndexBlocks, v.BlockChars = 8, 4
			return c.SetSection("prefix_cache", v)
		}},
		{"weighted", TablePrefixBlocks, func(c *Config) error {
			v := SectionOf[WeightedConfig](*c, "weighted")
			v.IndexBlocks, v.BlockChars = 8, 4
			return c.SetSection("weighted", v)
		}},
	} {
		t.Run(tc.name+"/"+tc.table, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Name = tc.name
			require.NoError(t, tc.set(&cfg))
			got := map[string]int{}
			p, err := New(cfg, Env{Evicted: func(table string, n int) { got[table] += n }})
			require.NoError(t, err)
			cs := cands(0, 0)
			for i := range 100 {
				k := fmt.Sprintf("client-%d", i)
				p.Pick(&Request{Prompt: k, InputTokens: 5, User: k, Session: k}, cs)
			}
			require.Positive(t, got[tc.table], "evictions from %s reported: %v", tc.table, got)
		})
	}
}
