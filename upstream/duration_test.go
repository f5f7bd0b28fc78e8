package upstream

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

func TestDurationYAML(t *testing.T) {
	tests := []struct {
		in      string
		want    time.Duration
		wantErr string
	}{
		{`d: 50ms`, 50 * time.Millisecond, ""},
		{`d: "1m30s"`, 90 * time.Second, ""},
		{`d: 0s`, 0, ""},
		{`d: 60`, 0, `invalid duration "60"`},
		{`d: soon`, 0, `invalid duration "soon"`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			var v struct {
				D Duration `yaml:"d"`
			}
			err := yaml.Unmarshal([]byte(tt.in), &v)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, v.D.Std())
		})
	}
}

func TestDurationRoundTrip(t *testing.T) {
	d := Duration(1500 * time.Millisecond)
	require.Equal(t, "1.5s", d.String())
	b, err := json.Marshal(struct{ D Duration }{d})
	require.NoError(t, err)
	require.JSONEq(t, `{"D":"1.5s"}`, string(b))
	out, err := yaml.Marshal(struct {
		D Duration `yaml:"d"`
	}{d})
	require.NoError(t, err)
	require.Equal(t, "d: 1.5s\n", string(out))
	var back struct{ D Duration }
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, d, back.D)
}
