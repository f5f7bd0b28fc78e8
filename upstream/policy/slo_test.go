package policy

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func newTestSLO(t *testing.T, pack bool, clock *fakeClock, set func(*SLOConfig)) *SLO {
	t.Helper()
	cfg := DefaultSLOConfig()
	cfg.MinSamples = 2
	if set != nil {
		set(&cfg)
	}
	p, err := NewSLO(cfg, pack, clock.Now)
	require.NoError(t, err)
	return withTracer(p)
}

// teach gives replica id the line ttft = a + b·inFlight, sampled at loads
// 0..4.
func teach(p *SLO, id string, a, b time.Duration) {
	for n := range 5 {
		p.ObserveTTFT(&Request{}, id, n, a+time.Duration(n)*b)
	}
}

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func TestSLOChoosesAmongThoseMeetingTheTarget(t *testing.T) {
	// r0: 100ms + 100ms per request in flight; r1: 50ms + 20ms; r2: 400ms flat.
	learn := func(p *SLO) {
		teach(p, "r0", ms(100), ms(100))
		teach(p, "r1", ms(50), ms(20))
		teach(p, "r2", ms(400), 0)
	}
	tests := []struct {
		name     string
		pack     bool
		target   time.Duration
		inFlight []int
		want     string
		note     string
	}{
		// Predictions 300, 130, 400ms: r0 and r1 meet 350ms.
		{"least-load: fewest in flight that meets", false, ms(350), []int{2, 4, 0}, "r0", noteSLOMet},
		{"pack-load: most in flight that meets", true, ms(350), []int{2, 4, 0}, "r1", noteSLOMet},
		// Predictions 300, 130, 400ms: only r1 meets 200ms, though it is the busiest.
		{"tight target: only the fast one", false, ms(200), []int{2, 4, 0}, "r1", noteSLOMet},
		// Nobody meets 100ms: least-request takes r2.
		{"none meets: least-request", false, ms(100), []int{2, 4, 0}, "r2", noteSLOMiss},
		{"none meets, pack-load: least-request too", true, ms(100), []int{2, 4, 0}, "r2", noteSLOMiss},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newTestSLO(t, tt.pack, newFakeClock(), nil)
			learn(p)
			cs := cands(tt.inFlight...)
			require.Equal(t, tt.want, cs[p.Pick(&Request{TTFTTarget: tt.target}, cs)].ID)
			rec := lastTrace(t, p)
			require.Equal(t, tt.note, rec.Note)
		})
	}
}

func TestSLOPackAndLeastLoadDiffer(t *testing.T) {
	clock := newFakeClock()
	least, pack := newTestSLO(t, false, clock, nil), newTestSLO(t, true, clock, nil)
	for _, p := range []*SLO{least, pack} {
		teach(p, "r0", ms(50), ms(10))
		teach(p, "r1", ms(50), ms(10))
	}
	cs := cands(1, 3) // both predicted well under 1s
	req := &Request{TTFTTarget: time.Second}
	require.Equal(t, "r0", cs[least.Pick(req, cs)].ID)
	require.Equal(t, "r1", cs[pack.Pick(req, cs)].ID)
}

func TestSLOTarget(t *testing.T) {
	// r0 at 500ms, r1 at 100ms; r0 has fewer in flight.
	learn := func(p *SLO) {
		teach(p, "r0", ms(500), 0)
		teach(p, "r1", ms(100), 0)
	}
	t.Run("no target anywhere: least-request", func(t *testing.T) {
		p := newTestSLO(t, false, newFakeClock(), nil)
		learn(p)
		cs := cands(0, 3)
		require.Equal(t, "r0", cs[p.Pick(&Request{}, cs)].ID)
		require.Equal(t, noteSLONoTarget, lastTrace(t, p).Note)
	})
	t.Run("pool default applies without a header", func(t *testing.T) {
		p := newTestSLO(t, false, newFakeClock(), func(c *SLOConfig) { c.TTFTTarget = ms(200) })
		learn(p)
		cs := cands(0, 3)
		require.Equal(t, "r1", cs[p.Pick(&Request{}, cs)].ID)
	})
	t.Run("the request's target wins over the default", func(t *testing.T) {
		p := newTestSLO(t, false, newFakeClock(), func(c *SLOConfig) { c.TTFTTarget = ms(200) })
		learn(p)
		cs := cands(0, 3)
		require.Equal(t, "r0", cs[p.Pick(&Request{TTFTTarget: time.Second}, cs)].ID)
	})
}

func TestSLOFallbackLeastPredicted(t *testing.T) {
	p := newTestSLO(t, false, newFakeClock(), func(c *SLOConfig) { c.Fallback = SLOFallbackLeastPredicted })
	teach(p, "r0", ms(500), 0)
	teach(p, "r1", ms(300), 0)
	cs := cands(0, 5)
	require.Equal(t, "r1", cs[p.Pick(&Request{TTFTTarget: ms(100)}, cs)].ID, "the least-bad miss, not the least loaded")
	require.Equal(t, noteSLOMiss, lastTrace(t, p).Note)
}

func TestSLOMissingSignal(t *testing.T) {
	t.Run("unmeasured replica is tried", func(t *testing.T) {
		p := newTestSLO(t, false, newFakeClock(), nil)
		teach(p, "r0", ms(500), 0)
		cs := cands(0, 4) // r1 never measured
		require.Equal(t, "r1", cs[p.Pick(&Request{TTFTTarget: ms(100)}, cs)].ID)
		require.Equal(t, noteSLOMet, lastTrace(t, p).Note)
	})
	t.Run("scraped mean TTFT stands in for a fit", func(t *testing.T) {
		p := newTestSLO(t, false, newFakeClock(), nil)
		teach(p, "r0", ms(500), 0)
		cs := cands(0, 4)
		cs[1].MeanTTFT, cs[1].HasTTFT = 0.8, true
		// Neither meets: least-request picks r0.
		require.Equal(t, "r0", cs[p.Pick(&Request{TTFTTarget: ms(100)}, cs)].ID)
		require.Equal(t, noteSLOMiss, lastTrace(t, p).Note)
		cs[1].Fresh = false // a stale mean is no prediction: r1 is tried
		require.Equal(t, "r1", cs[p.Pick(&Request{TTFTTarget: ms(100)}, cs)].ID)
	})
	t.Run("samples fade after a few windows", func(t *testing.T) {
		clock := newFakeClock()
		p := newTestSLO(t, false, clock, nil)
		teach(p, "r0", ms(500), 0)
		cs := cands(0)
		p.Pick(&Request{TTFTTarget: ms(100)}, cs)
		require.Equal(t, noteSLOMiss, lastTrace(t, p).Note)
		clock.Advance(5 * time.Minute) // weight 5·e^−5 < 2
		p.Pick(&Request{TTFTTarget: ms(100)}, cs)
		require.Equal(t, noteSLOMet, lastTrace(t, p).Note)
	})
}

func TestSLOTiesRotate(t *testing.T) {
	for _, pack := range []bool{false, true} {
		p := newTestSLO(t, pack, newFakeClock(), nil)
		cs := cands(2, 2, 2)
		require.Equal(t, []string{"r0", "r1", "r2", "r0"}, pickIDs(p, &Request{TTFTTarget: time.Second}, cs, 4))
	}
}

func TestSLOOneCandidate(t *testing.T) {
	p := newTestSLO(t, true, newFakeClock(), nil)
	teach(p, "r0", time.Second, 0)
	cs := cands(7)
	require.Equal(t, []string{"r0", "r0"}, pickIDs(p, &Request{TTFTTarget: ms(10)}, cs, 2))
}

func TestTTFTPredictorConverges(t *testing.T) {
	clock := newFakeClock()
	pred := newTTFTPredictor(time.Minute, 5, clock.Now)
	// ttft = 80ms + 35ms per request in flight, with ±5ms alternating noise.
	for i := range 400 {
		n := i % 9
		noise := ms(5)
		if i%2 == 0 {
			noise = -noise
		}
		pred.observe("r", n, ms(80)+time.Duration(n)*ms(35)+noise)
		clock.Advance(100 * time.Millisecond)
	}
	predict, unlock := pred.predictor()
	defer unlock()
	for _, n := range []int{0, 4, 12} {
		got, ok := predict("r", n)
		require.True(t, ok)
		require.InDelta(t, 0.080+0.035*float64(n), got, 0.003, "in flight %d", n)
	}
	_, ok := predict("other", 0)
	require.False(t, ok)
}

func TestTTFTPredictorDegenerateFits(t *testing.T) {
	pred := newTTFTPredictor(time.Minute, 1, newFakeClock().Now)
	// One load only: a flat line at the mean.
	pred.observe("flat", 3, ms(100))
	pred.observe("flat", 3, ms(300))
	// Falling with load: noise, also flat at the mean.
	pred.observe("down", 0, ms(300))
	pred.observe("down", 4, ms(100))
	predict, unlock := pred.predictor()
	defer unlock()
	for _, id := range []string{"flat", "down"} {
		got, ok := predict(id, 10)
		require.True(t, ok)
		require.InDelta(t, 0.2, got, 1e-9, id)
	}
}

func TestSLOConcurrentObserveAndPick(t *testing.T) {
	p := newTestSLO(t, false, newFakeClock(), nil)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := range 300 {
				p.ObserveTTFT(&Request{}, cands(0, 0, 0)[i%3].ID, i%5+g, ms(10*(i%5)))
			}
		}()
		go func() {
			defer wg.Done()
			cs := cands(1, 2, 3)
			for range 300 {
				i := p.Pick(&Request{TTFTTarget: ms(30)}, cs)
				require.True(t, i >= 0 && i < len(cs))
			}
		}()
	}
	wg.Wait()
}

func TestSLOConfigValidate(t *testing.T) {
	require.NoError(t, DefaultSLOConfig().ValidateAt("slo"))
	bad := SLOConfig{TTFTTarget: -time.Second, Fallback: "queue", Window: time.Millisecond, MinSamples: 0}
	err := bad.ValidateAt("pools.fast.policy.slo")
	for _, field := range []string{"ttft_target", "fallback", "window", "min_samples"} {
		require.ErrorContains(t, err, "pools.fast.policy.slo."+field+":")
	}
}
