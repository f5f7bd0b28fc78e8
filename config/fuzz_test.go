package config

import (
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

// FuzzConfigYAML: a config file of any bytes either fails to load with an error, or loads to
// a valid configuration that prints (as --print-config does, secrets aside) and loads back to
// a configuration that prints the same (an empty map and none print alike). Nothing panics.
func FuzzConfigYAML(f *testing.F) {
	f.Add(Example)
	for _, s := range []string{
		"",
		"server: {listen: 127.0.0.1:9000, body_limit: 2048, max_connections: 5}\n",
		"server:\n  request_timeout: 50\n",
		"auth: {keys_file: /etc/keys.yaml, reload_interval: 1m}\n",
		"pools:\n  fast:\n    replicas: [{url: http://10.0.0.1:8000}]\n  slow:\n    replicas: [{url: http://10.0.0.2:8000}]\n",
		"pools: {slow: {policy: {name: vtc-basic, vtc: {max_users: 3}}}}\n",
		"decision: {alpha: -1}\n",
		"a: 1\n---\nb: 2\n",
		"server: &a {listen: x}\nlog: *a\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg := DefaultConfig()
		if err := decodeYAML(data, &cfg); err != nil {
			return
		}
		if err := cfg.Validate(); err != nil {
			return
		}
		out, err := yaml.Marshal(cfg)
		require.NoError(t, err)
		back := DefaultConfig()
		require.NoError(t, decodeYAML(out, &back), "printed:\n%s", out)
		require.NoError(t, back.Validate())
		again, err := yaml.Marshal(back)
		require.NoError(t, err)
		require.Equal(t, string(out), string(again))
	})
}
