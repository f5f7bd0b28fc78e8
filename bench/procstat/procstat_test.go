package procstat

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name, stat string
		want       Times
		err        string
	}{
		{"plain", "4242 (triage) S 1 4242 4242 0 -1 4194560 1000 0 0 0 1234 56 0 0 20 0 9 0 100 0 0",
			Times{User: 12340 * time.Millisecond, System: 560 * time.Millisecond}, ""},
		{"name with spaces and parens", "7 (a (b) c) R 1 7 7 0 -1 0 0 0 0 0 3 4 0 0 20 0 1 0 100 0 0",
			Times{User: 30 * time.Millisecond, System: 40 * time.Millisecond}, ""},
		{"no name", "4242 triage S 1", Times{}, "no ')'"},
		{"short", "4242 (triage) S 1 2 3", Times{}, "4 fields after the command name, want at least 13"},
		{"not a number", "1 (x) S 1 1 1 0 -1 0 0 0 0 0 x 4 0", Times{}, `field 14 is "x"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse([]byte(tc.stat))
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestTimesArithmetic(t *testing.T) {
	a := Times{User: 100 * time.Millisecond, System: 20 * time.Millisecond}
	b := Times{User: 350 * time.Millisecond, System: 50 * time.Millisecond}
	require.Equal(t, Times{User: 250 * time.Millisecond, System: 30 * time.Millisecond}, b.Sub(a))
	require.Equal(t, 400*time.Millisecond, b.Total())
}

// TestReadSelfGrows reads this test process's own entry: it parses, and burning CPU makes
// the total grow by at least the work's share of a clock tick.
func TestReadSelfGrows(t *testing.T) {
	before, err := Read(os.Getpid())
	require.NoError(t, err)
	var after Times
	for x := 0; ; x++ {
		if x%1_000_000 == 0 {
			if after, err = Read(os.Getpid()); err != nil || after.Total() > before.Total() {
				break
			}
		}
	}
	require.NoError(t, err)
	require.Greater(t, after.Total(), before.Total())
	_, err = Read(-1)
	require.Error(t, err)
}
