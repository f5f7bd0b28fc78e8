package promtext

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParsePromText(t *testing.T) {
	in := `# HELP process_resident_memory_bytes Resident memory size in bytes.
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes 1.61734656e+08
triage_decisions_total{path="slow",reason="slow_granted"} 3
triage_decisions_total{path="fast",reason="fast model x"} 4 1700000000000
triage_slow_active 0
bad_line
`
	m := Parse([]byte(in))
	require.Equal(t, 1.61734656e+08, m.Get("process_resident_memory_bytes"))
	require.Equal(t, 3.0, m.Get(`triage_decisions_total{path="slow",reason="slow_granted"}`))
	require.Equal(t, 7.0, m.Sum("triage_decisions_total"))
	require.Equal(t, 0.0, m.Get("triage_slow_active"))
	require.True(t, math.IsNaN(m.Get("absent")))
	require.Equal(t, 0.0, m.Sum("absent"))
	require.Equal(t, 0.0, m.Sum("triage_slow"), "a name prefix is not the metric")
}
