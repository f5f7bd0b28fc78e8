package onnx

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/classifier"
)

// copyDir copies the files of src (not recursive) into a new temp dir.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	ents, err := os.ReadDir(src)
	require.NoError(t, err)
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644))
	}
	return dst
}

func TestLoadErrorsSayWhatAndWhere(t *testing.T) {
	base := testConfig(t, "")
	cases := []struct {
		name   string
		mutate func(t *testing.T, cfg *classifier.Config)
		want   []string
	}{
		{"missing model dir", func(t *testing.T, cfg *classifier.Config) { cfg.ModelDir = "/nonexistent/models" }, []string{"read manifest", "/nonexistent/models/manifest.json"}},
		{"corrupt manifest", func(t *testing.T, cfg *classifier.Config) {
			cfg.ModelDir = copyDir(t, base.ModelDir)
			require.NoError(t, os.WriteFile(filepath.Join(cfg.ModelDir, "manifest.json"), []byte("{not json"), 0o644))
		}, []string{"manifest", "invalid JSON"}},
		{"corrupt static table", func(t *testing.T, cfg *classifier.Config) {
			cfg.ModelDir = copyDir(t, base.ModelDir)
			require.NoError(t, os.WriteFile(filepath.Join(cfg.ModelDir, "static_table.bin"), []byte("garbage"), 0o644))
		}, []string{"static table", "static_table.bin", "sha256"}},
		{"corrupt head", func(t *testing.T, cfg *classifier.Config) {
			cfg.ModelDir = copyDir(t, base.ModelDir)
			require.NoError(t, os.WriteFile(filepath.Join(cfg.ModelDir, "head.onnx"), []byte("garbage"), 0o644))
		}, []string{"head", "head.onnx", "sha256"}},
		{"missing encoder", func(t *testing.T, cfg *classifier.Config) { cfg.EncoderDir = t.TempDir() }, []string{"tokenizer", "scripts/setup.sh"}},
		{"truncated encoder", func(t *testing.T, cfg *classifier.Config) {
			dir := t.TempDir()
			tok, _ := os.ReadFile(filepath.Join(base.EncoderDir, "tokenizer.json"))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "tokenizer.json"), tok, 0o644))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "model.onnx"), []byte("onnx?"), 0o644))
			cfg.EncoderDir = dir
		}, []string{"encoder", "model.onnx", "sha256", "does not match"}},
		{"encoder of another shape, unverified", func(t *testing.T, cfg *classifier.Config) {
			// The head is a valid ONNX file with the wrong inputs for an encoder.
			dir := t.TempDir()
			tok, _ := os.ReadFile(filepath.Join(base.EncoderDir, "tokenizer.json"))
			head, _ := os.ReadFile(filepath.Join(base.ModelDir, "head.onnx"))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "tokenizer.json"), tok, 0o644))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "model.onnx"), head, 0o644))
			cfg.EncoderDir, cfg.VerifyEncoder = dir, false
		}, []string{"encoder", "no input \"input_ids\""}},
		{"other onnxruntime path after load", func(t *testing.T, cfg *classifier.Config) { cfg.ORTLibrary = "/opt/other/libonnxruntime.so" }, []string{"already loaded", "/opt/other"}},
		{"invalid config", func(t *testing.T, cfg *classifier.Config) { cfg.IntraOpThreads = 0 }, []string{"classifier.intra_op_threads"}},
	}
	// Load the real runtime first so the "already loaded" case is meaningful.
	newTestClassifier(t, "")
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			tc.mutate(t, &cfg)
			_, err := New(cfg)
			require.Error(t, err)
			for _, w := range tc.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestWrongRuntimeLibraryIsRefused(t *testing.T) {
	require.Error(t, wrongLibErr)
	require.Contains(t, wrongLibErr.Error(), "triage-not-onnxruntime.so")
	require.Contains(t, wrongLibErr.Error(), "1.24")
}
