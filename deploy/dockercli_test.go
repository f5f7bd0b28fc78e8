//go:build docker

package deploy

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The tests behind the docker build tag need a Docker engine and the image; `make
// test-docker` (part of `make test`) installs and starts the engine, builds the image and
// runs them. A missing engine, CLI or image fails them: nothing here skips.

// image is the Triage image under test: $IMAGE as `make image` builds it.
var image = func() string {
	if v := os.Getenv("IMAGE"); v != "" {
		return v
	}
	return "triage:dev"
}()

// cli runs a command-line program (docker, docker-compose) with a deadline and returns its
// stdout; a failure fails the test with the program's stderr.
func cli(t *testing.T, timeout time.Duration, env []string, name string, args ...string) string {
	t.Helper()
	out, err := cliErr(timeout, env, dockerTool(t, name), args...)
	require.NoError(t, err, "%s %s", name, strings.Join(args, " "))
	return out
}

// cliErr is cli without the test: stdout, or an error carrying stderr.
func cliErr(timeout time.Duration, env []string, bin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), &cliError{err: err, stderr: stderr.String()}
	}
	return stdout.String(), nil
}

type cliError struct {
	err    error
	stderr string
}

func (e *cliError) Error() string { return e.err.Error() + ": " + strings.TrimSpace(e.stderr) }
func (e *cliError) Unwrap() error { return e.err }

// dockerTool returns the path of docker or docker-compose, failing the test without it.
func dockerTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	require.NoError(t, err, "%s is not installed: run `scripts/setup.sh docker` (Debian packages; `make test` does it)", name)
	return p
}

// requireImage fails the test unless the engine answers and has the image.
func requireImage(t *testing.T) {
	t.Helper()
	_, err := cliErr(30*time.Second, nil, dockerTool(t, "docker"), "image", "inspect", image)
	require.NoError(t, err, "image %s is not in the engine: run `make image` (make test-docker does)", image)
}
