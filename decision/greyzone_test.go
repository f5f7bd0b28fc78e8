package decision

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestGreyZoneDecide(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Policy = PolicyGreyZone
	p, err := NewPolicy(cfg)
	require.NoError(t, err)
	require.IsType(t, &GreyZone{}, p)

	tests := []struct {
		pSlow  float64
		queue  int
		slow   bool
		reason Reason
	}{
		// Outside the zone the model's label decides whatever the queue.
		{0.10, 0, false, ReasonFastModel},
		{0.44, 0, false, ReasonFastModel},
		{0.56, 50, true, ReasonSlowGranted},
		{0.90, 0, true, ReasonSlowGranted},
		// Zone edges are inclusive.
		{0.45, 11, false, ReasonGreyZoneFast},
		{0.55, 2, true, ReasonGreyZoneSlow},
		// Long queue (> 10) forces fast, short queue (< 3) forces slow.
		{0.54, 11, false, ReasonGreyZoneFast},
		{0.46, 2, true, ReasonGreyZoneSlow},
		{0.46, 0, true, ReasonGreyZoneSlow},
		// 3..10 inclusive: the model's label.
		{0.46, 3, false, ReasonFastModel},
		{0.50, 10, false, ReasonFastModel},
		{0.54, 10, true, ReasonSlowGranted},
		{0.54, 3, true, ReasonSlowGranted},
		// NaN is outside every zone and never slow.
		{math.NaN(), 0, false, ReasonFastModel},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("p=%v/queue=%d", tt.pSlow, tt.queue), func(t *testing.T) {
			d := p.Decide(Score{PSlow: tt.pSlow, Cutoff: 0.5}, State{SlowActive: 40, SlowMax: 50, QueueLen: tt.queue})
			require.Equal(t, tt.slow, d.Slow)
			require.Equal(t, tt.reason, d.Reason)
			require.Equal(t, 0.5, d.Threshold)
			require.InDelta(t, 0.8, d.Load, 1e-12)
		})
	}
}
