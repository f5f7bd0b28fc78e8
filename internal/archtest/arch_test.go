// Package archtest keeps the layout the code is built on (docs/architecture.md): which
// package may import which, and where the process environment is read; and that every
// relative link of every Markdown file leads somewhere. It has no code.
package archtest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/triage-gw/triage/"

type pkg struct {
	ImportPath string
	Dir        string
	Imports    []string
	GoFiles    []string
}

func listPackages(t *testing.T) map[string]pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", module+"...")
	cmd.Dir = filepath.Join("..", "..")
	out, err := cmd.Output()
	require.NoError(t, err, "go list")
	pkgs := map[string]pkg{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p pkg
		require.NoError(t, dec.Decode(&p))
		pkgs[strings.TrimPrefix(p.ImportPath, module)] = p
	}
	require.Contains(t, pkgs, "router")
	return pkgs
}

func projectImports(p pkg) []string {
	var out []string
	for _, imp := range p.Imports {
		if rest, ok := strings.CutPrefix(imp, module); ok {
			out = append(out, rest)
		}
	}
	return out
}

func TestImportRules(t *testing.T) {
	pkgs := listPackages(t)
	// Leaf packages import no other project package.
	for _, leaf := range []string{"batcher", "decision", "upstream/policy", "bench/stats", "bench/sse", "translate"} {
		require.Empty(t, projectImports(pkgs[leaf]), "%s is a leaf", leaf)
	}
	for name, p := range pkgs {
		imps := projectImports(p)
		for _, imp := range imps {
			// Nothing imports a program, and only programs import the HTTP layer.
			require.False(t, strings.HasPrefix(imp, "cmd/"), "%s imports %s", name, imp)
			if imp == "server" {
				require.True(t, strings.HasPrefix(name, "cmd/"), "%s imports the HTTP layer", name)
			}
		}
		for _, ext := range p.Imports {
			switch {
			case strings.HasPrefix(ext, "github.com/gofiber/fiber"), strings.HasPrefix(ext, "github.com/valyala/fasthttp"):
				require.Equal(t, "server", name, "fiber/fasthttp only in the HTTP layer")
			case strings.HasPrefix(ext, "github.com/yalue/onnxruntime_go"), strings.HasPrefix(ext, "github.com/daulet/tokenizers"):
				require.Equal(t, "classifier", name, "ONNX Runtime and the tokenizer only in classifier")
			case strings.HasPrefix(ext, "github.com/redis/rueidis"):
				require.Equal(t, "fleet", name, "the Redis client only in fleet")
			}
		}
	}
	// The HTTP layer routes through the pipeline; it neither batches nor classifies itself.
	for _, imp := range projectImports(pkgs["server"]) {
		require.NotContains(t, []string{"batcher", "classifier"}, imp, "server imports %s", imp)
	}
}

// The process environment is read in one place, config loading.
func TestEnvironmentIsReadOnlyInConfig(t *testing.T) {
	for name, p := range listPackages(t) {
		if name == "config" {
			continue
		}
		for _, f := range p.GoFiles {
			fh, err := os.Open(filepath.Join(p.Dir, f))
			require.NoError(t, err)
			sc := bufio.NewScanner(fh)
			for n := 1; sc.Scan(); n++ {
				line := sc.Text()
				if strings.HasPrefix(strings.TrimSpace(line), "//") {
					continue
				}
				for _, call := range []string{"os.Getenv(", "os.LookupEnv(", "os.Environ("} {
					require.NotContains(t, line, call, "%s/%s:%d", name, f, n)
				}
			}
			fh.Close()
		}
	}
}
