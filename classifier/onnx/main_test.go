package onnx

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/triage-gw/triage/classifier"
)

// repo is the repository root seen from this package's tests.
const repo = "../.."

// wrongLibErr is what loading a library that is not ONNX Runtime gave, tried
// before anything else because the runtime can be loaded once per process.
var wrongLibErr error

func TestMain(m *testing.M) {
	bogus := filepath.Join(os.TempDir(), "triage-not-onnxruntime.so")
	_ = os.WriteFile(bogus, []byte("not a shared library"), 0o644)
	wrongLibErr = initRuntime(bogus)
	code := m.Run()
	_ = DestroyRuntime()
	os.Exit(code)
}

func testConfig(t testing.TB, variant string) classifier.Config {
	t.Helper()
	cfg := classifier.DefaultConfig()
	cfg.ModelDir = filepath.Join(repo, "models", variant)
	enc := "all-minilm-l6-v2"
	if variant == "int8" {
		enc = "all-minilm-l6-v2-q"
	}
	cfg.EncoderDir = filepath.Join(repo, ".deps/encoders", enc)
	cfg.ORTLibrary = filepath.Join(repo, ".deps/onnxruntime/libonnxruntime.so")
	return cfg
}

func newTestClassifier(t testing.TB, variant string) *Classifier {
	t.Helper()
	c, err := New(testConfig(t, variant))
	if err != nil {
		t.Fatalf("load classifier (run scripts/setup.sh first): %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}
