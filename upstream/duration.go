package upstream

import (
	"fmt"
	"time"
)

// Duration is a time.Duration written in config as a Go duration string
// ("50ms", "1m30s"). A bare number such as 60 is rejected rather than
// guessed at: "60" could mean seconds or nanoseconds, and guessing wrong
// is how a timer silently never fires.
//
// It implements encoding.TextUnmarshaler, so gopkg.in/yaml.v3 and
// encoding/json both decode it without a custom hook.
type Duration time.Duration

// Std returns d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// String formats d like time.Duration does ("1m0s").
func (d Duration) String() string { return time.Duration(d).String() }

// UnmarshalText parses a duration string with time.ParseDuration.
func (d *Duration) UnmarshalText(text []byte) error {
	v, err := time.ParseDuration(string(text))
	if err != nil {
		return fmt.Errorf("invalid duration %q (want a string like \"50ms\" or \"1m\")", string(text))
	}
	*d = Duration(v)
	return nil
}

// MarshalText writes d in the form UnmarshalText reads.
func (d Duration) MarshalText() ([]byte, error) {
	return []byte(time.Duration(d).String()), nil
}
