package gatewaybench

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/config"
	"github.com/triage-gw/triage/router"
)

// Every variant's generated config loads in the gateway and says what its name says.
func TestFailOpenVariantConfigsLoad(t *testing.T) {
	vs := failOpenVariants([]time.Duration{50 * time.Millisecond})
	require.Len(t, vs, 5, "pinned, then before and 50ms, cascade on and off")
	require.True(t, vs[0].Pinned)
	for _, v := range vs {
		p := filepath.Join(t.TempDir(), "gw.yaml")
		require.NoError(t, os.WriteFile(p, []byte(v.yaml("http://127.0.0.1:1")), 0o644))
		cfg, err := config.Load(config.Sources{File: p, Environ: []string{}})
		require.NoError(t, err, v.Name)
		require.Equal(t, v.Cascade, cfg.Cascade.Enabled, v.Name)
		require.Equal(t, v.Budget, cfg.Routing.ClassifyBudget, v.Name)
		want := router.FallbackFast
		if v.Reject {
			want = router.FallbackReject
			require.Zero(t, v.Budget, "before fail-open there was no budget")
		}
		require.Equal(t, want, cfg.Routing.Fallback, v.Name)
		require.Len(t, cfg.Pools.Slow.Replicas, 1)
		if v.Pinned {
			require.Equal(t, v.model(), cfg.Pools.Fast.Model, "the pinned variant names the fast pool's model")
			require.NotEqual(t, v.model(), cfg.Pools.Slow.Model)
		} else {
			require.Equal(t, "auto", v.model())
		}
	}
}
