package sim

import (
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSlowdownScalesEveryDelay checks that SetSlowdown multiplies prefill
// and each token gap of requests that start after it, and that setting 1
// restores the configured speed.
func TestSlowdownScalesEveryDelay(t *testing.T) {
	cfg := zeroLatency()
	cfg.TTFTBase = 10 * time.Millisecond
	cfg.PrefillPerToken = time.Millisecond
	cfg.DecodePerToken = 5 * time.Millisecond
	cfg.KVCacheBlocks = 0 // every prefill is cold, so the three requests cost the same
	clock := newInstantClock()
	s, base := start(t, cfg, Options{Clock: clock})
	body := `{"prompt":"0123456789abcdef","max_tokens":3,"stream":true}` // 4 prompt tokens
	ask := func() []time.Duration {
		before := len(clock.recorded())
		resp, b := post(t, base+"/v1/completions", body)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
		return clock.recorded()[before:]
	}
	prefill := cfg.PrefillDelay(4, 0)
	require.Equal(t, 1.0, s.Slowdown())
	require.Equal(t, []time.Duration{prefill, 5 * time.Millisecond, 5 * time.Millisecond}, ask(), "prefill, then 2 token gaps")

	require.NoError(t, s.SetSlowdown(2))
	require.Equal(t, 2.0, s.Slowdown())
	require.Equal(t, []time.Duration{2 * prefill, 10 * time.Millisecond, 10 * time.Millisecond}, ask(), "half speed doubles every delay")

	require.NoError(t, s.SetSlowdown(1))
	require.Equal(t, []time.Duration{prefill, 5 * time.Millisecond, 5 * time.Millisecond}, ask(), "back to the configured speed")

	for _, bad := range []float64{0, -1, math.NaN(), math.Inf(1)} {
		require.Error(t, s.SetSlowdown(bad))
	}
	require.Equal(t, 1.0, s.Slowdown(), "a refused factor changes nothing")
}
