package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/triage-gw/triage/config"
)

func runArgs(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(context.Background(), args, &out, &errOut)
	return out.String(), err
}

func TestHelpDocumentsFlagsEnvRuleAndEverySetting(t *testing.T) {
	out, err := runArgs(t, "--help")
	require.NoError(t, err)
	for _, want := range []string{"-config", "-listen", "127.0.0.1:8080", "-print-config", "-pprof", "config/example.yaml", "TRIAGE_CONFIG", "TRIAGE_DECISION_ALPHA"} {
		require.Contains(t, out, want)
	}
	for _, v := range config.EnvVars() {
		require.Contains(t, out, v.Name)
	}
}

func TestPrintConfigAppliesFileEnvAndFlag(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "t.yaml")
	require.NoError(t, os.WriteFile(path, []byte("decision:\n  alpha: 0.2\nadmin:\n  token: a-very-secret-admin-token\n"), 0o600))
	t.Setenv("TRIAGE_BATCHER_MAX_BATCH", "16")
	out, err := runArgs(t, "--config", path, "--listen", "0.0.0.0:9999", "--simulate", "--print-config")
	require.NoError(t, err)
	require.NotContains(t, out, "very-secret")
	var cfg map[string]map[string]any
	require.NoError(t, yaml.Unmarshal([]byte(out), &cfg))
	require.Equal(t, 0.2, cfg["decision"]["alpha"])
	require.Equal(t, 16, cfg["batcher"]["max_batch"])
	require.Equal(t, "0.0.0.0:9999", cfg["server"]["listen"])
}

func TestHealthcheckProbesTheListenAddress(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	_, port, err := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	require.NoError(t, err)
	// A wildcard listen address is probed on 127.0.0.1, as in the image (0.0.0.0:8080).
	_, err = runArgs(t, "--healthcheck", "--listen", "0.0.0.0:"+port)
	require.NoError(t, err)
	srv.Close()
	_, err = runArgs(t, "--healthcheck", "--listen", "0.0.0.0:"+port)
	require.ErrorContains(t, err, "health check")
}

func TestPrintExampleIsTheExample(t *testing.T) {
	out, err := runArgs(t, "--print-example")
	require.NoError(t, err)
	require.Equal(t, string(config.Example), out)
}

func TestStartupErrorsNameTheProblem(t *testing.T) {
	_, err := runArgs(t, "--bogus")
	require.ErrorContains(t, err, "bogus")
	_, err = runArgs(t, "extra")
	require.ErrorContains(t, err, `unexpected argument "extra"`)

	t.Setenv("TRIAGE_DECISION_ALPHA", "-1")
	_, err = runArgs(t, "--print-config")
	require.ErrorContains(t, err, "decision.alpha: must be >= 0, got -1")

	t.Setenv("TRIAGE_DECISION_ALPHA", "0.45")
	t.Setenv("TRIAGE_NOPE", "1")
	_, err = runArgs(t)
	require.ErrorContains(t, err, "TRIAGE_NOPE")
	require.False(t, strings.Contains(err.Error(), "listening"))
}

// Fail closed: a configuration whose pools have no replica never starts the simulators.
// The gateway stops before listening, naming each empty pool and the way to ask for them.
func TestNoReplicasStopsAtStartupUnlessSimulated(t *testing.T) {
	dir := t.TempDir()
	noReplicas := filepath.Join(dir, "no-replicas.yaml")
	require.NoError(t, os.WriteFile(noReplicas, []byte("pools:\n  fast: {model: small}\n  slow: {model: big}\n"), 0o600))
	for _, args := range [][]string{{}, {"--config", noReplicas}} {
		_, err := runArgs(t, append(args, "--listen", "127.0.0.1:0")...)
		require.Error(t, err, "args %v", args)
		require.ErrorContains(t, err, `pools.fast.replicas: pool "fast" has no replica`)
		require.ErrorContains(t, err, `pools.slow.replicas: pool "slow" has no replica`)
		require.ErrorContains(t, err, "--simulate")
	}

	withReplicas := filepath.Join(dir, "replicas.yaml")
	require.NoError(t, os.WriteFile(withReplicas, []byte("pools:\n  fast:\n    replicas: [{url: \"http://127.0.0.1:9\"}]\n"+
		"  slow:\n    replicas: [{url: \"http://127.0.0.1:9\"}]\n"), 0o600))
	_, err := runArgs(t, "--config", withReplicas, "--simulate", "--print-config")
	require.ErrorContains(t, err, "cannot be combined with configured replicas")

	// The image's health check runs beside a gateway started with --simulate and does not
	// see that flag: it needs the listen address only.
	_, err = runArgs(t, "--config", noReplicas, "--healthcheck", "--listen", "127.0.0.1:1")
	require.ErrorContains(t, err, "health check")
}
