package trace

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/bench/dolly"
	"github.com/triage-gw/triage/bench/stats"
	"github.com/triage-gw/triage/sim"
)

// testRows is a small synthetic Dolly: short rows and rows with long
// contexts, so heavy sessions have documents to draw.
func testRows() []dolly.Row {
	var rows []dolly.Row
	for i := range 40 {
		r := dolly.Row{
			Instruction: fmt.Sprintf("Question %d: what is item %d?", i, i),
			Response:    strings.Repeat(fmt.Sprintf("answer %d. ", i), 20),
			Category:    "open_qa",
		}
		if i%4 == 0 {
			r.Context = strings.Repeat(fmt.Sprintf("document %d sentence. ", i), 60)
		}
		rows = append(rows, r)
	}
	return rows
}

func smallTraceConfig() Config {
	c := DefaultConfig()
	c.Rate = 50
	c.Duration = 4 * time.Second
	c.SystemTokens = 200
	c.ActiveSessions = 6
	return c
}

func TestGenerateTraceDeterministic(t *testing.T) {
	rows := testRows()
	a, err := Generate(smallTraceConfig(), rows)
	require.NoError(t, err)
	b, err := Generate(smallTraceConfig(), rows)
	require.NoError(t, err)
	require.Equal(t, a, b, "same seed, same trace")

	other := smallTraceConfig()
	other.Seed = 2
	c, err := Generate(other, rows)
	require.NoError(t, err)
	require.NotEqual(t, a.Requests[0].At, c.Requests[0].At, "another seed, another trace")
}

func TestGenerateTraceShape(t *testing.T) {
	cfg := smallTraceConfig()
	tr, err := Generate(cfg, testRows())
	require.NoError(t, err)
	require.NotEmpty(t, tr.Requests)

	last := map[int]int{} // session -> index of its latest request
	var prevAt time.Duration
	systems := map[string]bool{}
	for i, r := range tr.Requests {
		require.Equal(t, i, r.ID)
		require.GreaterOrEqual(t, r.At, prevAt, "arrivals in order")
		require.LessOrEqual(t, r.At, cfg.Duration)
		prevAt = r.At
		require.Equal(t, sim.RenderChat(r.Messages), r.Prompt)
		require.Equal(t, sim.CountTokens(r.Prompt), r.InputTokens)
		require.Equal(t, "system", r.Messages[0].Role)
		require.Equal(t, "user", r.Messages[len(r.Messages)-1].Role)
		require.Len(t, r.Messages, 2+2*r.Turn, "system + previous user/assistant pairs + this user message")
		systems[r.Messages[0].Content] = true

		p, seen := last[r.Session]
		if !seen {
			require.Equal(t, -1, r.Prev)
			require.Equal(t, 0, r.Turn)
		} else {
			require.Equal(t, p, r.Prev)
			prev := tr.Requests[p]
			require.Equal(t, prev.Turn+1, r.Turn)
			require.True(t, strings.HasPrefix(r.Prompt, prev.Prompt), "a turn extends the previous turn's prompt")
			require.Equal(t, prev.User, r.User)
			require.Equal(t, prev.Heavy, r.Heavy)
		}
		last[r.Session] = i
	}
	require.LessOrEqual(t, len(systems), cfg.SystemPrompts)
	require.Greater(t, len(systems), 1, "several system prompts in use")
	require.Equal(t, len(last), tr.Sessions)
}

func TestGenerateTraceTurnLimits(t *testing.T) {
	cfg := smallTraceConfig()
	cfg.Duration = 0
	cfg.Requests = 400
	tr, err := Generate(cfg, testRows())
	require.NoError(t, err)
	require.Len(t, tr.Requests, 400)
	turns := map[int]int{}
	heavy := map[int]bool{}
	for _, r := range tr.Requests {
		turns[r.Session]++
		heavy[r.Session] = r.Heavy
	}
	nHeavy := 0
	for s, n := range turns {
		max := cfg.LightTurnsMax
		if heavy[s] {
			max = cfg.HeavyTurnsMax
			nHeavy++
		}
		require.LessOrEqual(t, n, max, "session %d", s)
	}
	require.Positive(t, nHeavy)
	require.Equal(t, nHeavy, tr.Heavy)
}

func TestPoissonArrivals(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	const rate = 200.0
	at := PoissonArrivals(rng, rate, 0, 20000)
	require.Len(t, at, 20000)
	gaps := make([]float64, len(at))
	prev := time.Duration(0)
	for i, a := range at {
		require.Greater(t, a, prev-1)
		gaps[i] = (a - prev).Seconds()
		prev = a
	}
	mean := stats.Mean(gaps)
	var ss float64
	for _, g := range gaps {
		ss += (g - mean) * (g - mean)
	}
	cv := math.Sqrt(ss/float64(len(gaps))) / mean
	require.InDelta(t, 1/rate, mean, 0.03/rate, "mean gap 1/rate")
	require.InDelta(t, 1.0, cv, 0.05, "exponential gaps have CV 1")

	w := PoissonArrivals(rand.New(rand.NewPCG(1, 1)), 100, 2*time.Second, 0)
	require.InDelta(t, 200, len(w), 60)
	require.LessOrEqual(t, w[len(w)-1], 2*time.Second)
}

func TestTruncateUTF8(t *testing.T) {
	require.Equal(t, "abc", truncateUTF8("abc", 5))
	require.Equal(t, "ab", truncateUTF8("abc", 2))
	require.Equal(t, "a", truncateUTF8("aé", 2), "never split a character")
	require.Equal(t, "", truncateUTF8("é", 1))
}

func TestTraceValidate(t *testing.T) {
	c := DefaultConfig()
	c.Rate = 0
	c.LightTurnsMax = 0
	err := c.Validate()
	require.ErrorContains(t, err, "rate")
	require.ErrorContains(t, err, "light-turns")
}

func TestGenerateNoArrival(t *testing.T) {
	cfg := smallTraceConfig()
	cfg.Rate = 0.001
	cfg.Duration = time.Millisecond
	_, err := Generate(cfg, testRows())
	require.ErrorIs(t, err, ErrNoRequests)
	_, err = Generate(smallTraceConfig(), nil)
	require.ErrorContains(t, err, "no dolly rows")
}

// TestGenerateHeavyUser checks the tenant mix: the heavy user issues about
// the share of requests asked for, only heavy sessions, and the light
// sessions are spread over all the other users, the same for a seed.
func TestGenerateHeavyUser(t *testing.T) {
	for _, share := range []float64{0.5, 0.25} {
		for _, seed := range []uint64{1, 2, 3} {
			t.Run(fmt.Sprintf("share %v seed %d", share, seed), func(t *testing.T) {
				cfg := DefaultConfig()
				cfg.SystemTokens = 200
				cfg.Seed = seed
				cfg.HeavyUserShare = share
				tr, err := Generate(cfg, testRows())
				require.NoError(t, err)
				again, err := Generate(cfg, testRows())
				require.NoError(t, err)
				require.Equal(t, tr, again, "same seed, same tenant mix")

				heavy := 0
				light := map[string]int{}
				for _, r := range tr.Requests {
					require.Equal(t, r.User == HeavyUser, r.Heavy, "the heavy user's sessions, and only they, are heavy")
					if r.Heavy {
						heavy++
					} else {
						light[r.User]++
					}
				}
				got := float64(heavy) / float64(len(tr.Requests))
				require.InDelta(t, share, got, 0.08, "the heavy user's share of requests")
				require.Len(t, light, cfg.Users-1, "light sessions use every other user")
				require.Equal(t, heavy, tr.Stats(64).HeavyRequests)
			})
		}
	}
	cfg := DefaultConfig()
	cfg.HeavyUserShare = 0.5
	cfg.Users = 1
	require.ErrorContains(t, cfg.Validate(), "trace users: must be >= 2 with a heavy user")
	cfg.Users, cfg.HeavyUserShare = 8, 1
	require.ErrorContains(t, cfg.Validate(), "trace heavy-user-share: must be in [0, 1), got 1")
}
