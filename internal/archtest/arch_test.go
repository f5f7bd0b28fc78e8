// Package archtest keeps the layout the code is built on (docs/architecture.md): which
// package may import which, which may link the model runtime (cgo), and where the process
// environment is read; and that every relative link of every Markdown file leads somewhere.
// It has no code.
package archtest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1") // the graph cgo builds, also under make test-pure
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
			// Nothing imports a program, and only programs import the HTTP layer (and config,
			// which composes the HTTP layer's config sections).
			// A program's own packages (cmd/<program>/internal/...) are its, not a program.
			if strings.HasPrefix(imp, "cmd/") {
				require.True(t, strings.HasPrefix(imp, program(name)+"/internal/"), "%s imports %s", name, imp)
			}
			if imp == "server" {
				require.True(t, strings.HasPrefix(name, "cmd/") || name == "config", "%s imports the HTTP layer", name)
			}
		}
		for _, ext := range p.Imports {
			switch {
			case strings.HasPrefix(ext, "github.com/gofiber/fiber"), strings.HasPrefix(ext, "github.com/valyala/fasthttp"):
				require.Equal(t, "server", name, "fiber/fasthttp only in the HTTP layer")
			case isRuntime(ext):
				require.Equal(t, "classifier/onnx", name, "ONNX Runtime and the tokenizer only in classifier/onnx")
			case strings.HasPrefix(ext, "github.com/redis/rueidis"):
				require.Equal(t, "fleet", name, "the Redis client only in fleet")
			}
		}
	}
	// The HTTP layer routes through the pipeline; it neither batches nor classifies itself.
	for _, imp := range projectImports(pkgs["server"]) {
		require.NotContains(t, []string{"batcher", "classifier", "classifier/onnx"}, imp, "server imports %s", imp)
	}
	// The HTTP layer is handed its own config and the parts it serves: it depends on config
	// (and through it on the fleet and the simulators) through no chain of imports.
	deps := projectDeps(pkgs, "server")
	for _, forbidden := range []string{"config", "fleet", "sim", "cmd/triage"} {
		require.NotContains(t, deps, forbidden, "server depends on %s", forbidden)
	}
	// The model is wired in by the program alone; the router knows it by its interfaces.
	for name, p := range pkgs {
		if slices.Contains(projectImports(p), "classifier/onnx") {
			require.Equal(t, "cmd/triage", name, "%s imports classifier/onnx: only cmd/triage wires the model in", name)
		}
	}
}

// program returns the program a package belongs to ("cmd/triage-bench" for
// "cmd/triage-bench/internal/sweep"), or "" outside cmd/.
func program(name string) string {
	parts := strings.SplitN(name, "/", 3)
	if len(parts) < 2 || parts[0] != "cmd" {
		return ""
	}
	return parts[0] + "/" + parts[1]
}

// projectDeps returns every project package that name depends on, directly or through others.
func projectDeps(pkgs map[string]pkg, name string) map[string]bool {
	seen := map[string]bool{}
	var walk func(string)
	walk = func(n string) {
		for _, imp := range projectImports(pkgs[n]) {
			if !seen[imp] {
				seen[imp] = true
				walk(imp)
			}
		}
	}
	walk(name)
	return seen
}

// runtimeAllowed are the only packages that may depend on ONNX Runtime or the tokenizer,
// directly or through other packages, their tests included: the model and the program that
// wires it in. Both are cgo; everything else builds, vets and tests with CGO_ENABLED=0
// (make test-pure, whose RUNTIME_PKGS must name these).
var runtimeAllowed = []string{"classifier/onnx", "cmd/triage"}

// isRuntime reports whether an import path is ONNX Runtime's or the tokenizer's binding.
func isRuntime(path string) bool {
	for _, mod := range []string{"github.com/yalue/onnxruntime_go", "github.com/daulet/tokenizers"} {
		if path == mod || strings.HasPrefix(path, mod+"/") {
			return true
		}
	}
	return false
}

// listed is one package of `go list -test -json`: a package, its test variant
// ("p [p.test]"), its external test package ("p_test [p.test]") or its test main
// ("p.test"). ForTest names the package under test for the variants.
type listed struct {
	ImportPath string
	ForTest    string
	Imports    []string
	Deps       []string
}

// TestModelRuntimeOnlyWhereAllowed checks the transitive import graph, tests included: a
// package that reaches ONNX Runtime or the tokenizer through any chain of imports needs cgo to
// build, so only runtimeAllowed may.
func TestModelRuntimeOnlyWhereAllowed(t *testing.T) {
	cmd := exec.Command("go", "list", "-test", "-json", module+"...")
	cmd.Dir = filepath.Join("..", "..")
	// The graph cgo builds: with cgo off, the bindings' files are left out and the edges
	// this test looks for would not be listed.
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	out, err := cmd.Output()
	require.NoError(t, err, "go list -test")
	var all []listed
	byPath := map[string]listed{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p listed
		require.NoError(t, dec.Decode(&p))
		all = append(all, p)
		byPath[p.ImportPath] = p
	}
	var reached []string
	for _, p := range all {
		under := p.ImportPath
		if p.ForTest != "" {
			under = p.ForTest
		}
		under = strings.TrimSuffix(strings.TrimPrefix(under, module), ".test")
		if !slices.ContainsFunc(p.Deps, isRuntime) {
			continue
		}
		reached = append(reached, under)
		require.Contains(t, runtimeAllowed, under, "%s needs cgo to build: %s", p.ImportPath, strings.Join(runtimeChain(byPath, p.ImportPath), " -> "))
	}
	// The check sees the edges it guards against: the model does link the runtime.
	require.Contains(t, reached, "classifier/onnx")
}

// runtimeChain returns a shortest chain of imports from the package from to a runtime binding,
// for the failure message.
func runtimeChain(byPath map[string]listed, from string) []string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		if isRuntime(cur) {
			var chain []string
			for p := cur; p != ""; p = prev[p] {
				chain = append([]string{strings.TrimPrefix(p, module)}, chain...)
			}
			return chain
		}
		for _, imp := range byPath[cur].Imports {
			if _, seen := prev[imp]; !seen {
				prev[imp] = cur
				queue = append(queue, imp)
			}
		}
	}
	return []string{from, "..."}
}

// TestPureTargetExcludesOnlyTheAllowed keeps make test-pure's exclusions equal to
// runtimeAllowed: excluding more would leave a package untested without cgo, fewer would
// fail the target.
func TestPureTargetExcludesOnlyTheAllowed(t *testing.T) {
	mk, err := os.ReadFile(filepath.Join("..", "..", "Makefile"))
	require.NoError(t, err)
	listed := makeList(t, string(mk), "RUNTIME_PKGS")
	slices.Sort(listed)
	require.Equal(t, runtimeAllowed, listed, "the Makefile's RUNTIME_PKGS")
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
