package classifier

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// repo is the repository root seen from this package's tests.
const repo = ".."

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

func editManifest(t *testing.T, dir string, f func(map[string]any)) {
	t.Helper()
	p := filepath.Join(dir, "manifest.json")
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	f(m)
	b, err = json.MarshalIndent(m, "", "  ")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(p, b, 0o644))
}

func TestShippedManifestsLoad(t *testing.T) {
	for _, variant := range []string{"", "int8"} {
		m, err := LoadManifest(filepath.Join(repo, "models", variant))
		require.NoError(t, err, "variant %q", variant)
		require.Equal(t, m.Encoder.Dim+1, m.FeatureDim(), "mean_pooled_l2 then has_context")
		require.Equal(t, variant == "", m.Static != nil, "only the fp32 model has a static stage")
		if variant == "" {
			require.Equal(t, NoiseFilter, m.TextFilter, "the shipped heads were trained behind the noise filter")
		}
		v := m.ContentVersion([]string{"a", "b"})
		require.True(t, strings.HasPrefix(v, m.Version+"+"), v)
		require.NotEqual(t, v, m.ContentVersion([]string{"b", "a"}), "artifact order counts")
	}
}

func TestLoadManifestErrorsSayWhatAndWhere(t *testing.T) {
	base := filepath.Join(repo, "models")
	cases := []struct {
		name string
		dir  func(t *testing.T) string
		want []string
	}{
		{"missing model dir", func(t *testing.T) string { return "/nonexistent/models" }, []string{"read manifest", "/nonexistent/models/manifest.json"}},
		{"corrupt manifest", func(t *testing.T) string {
			dir := copyDir(t, base)
			require.NoError(t, os.WriteFile(filepath.Join(dir, "manifest.json"), []byte("{not json"), 0o644))
			return dir
		}, []string{"manifest", "invalid JSON"}},
		{"manifest with wrong pooling", func(t *testing.T) string {
			dir := copyDir(t, base)
			editManifest(t, dir, func(m map[string]any) { m["encoder"].(map[string]any)["pooling"] = "cls" })
			return dir
		}, []string{"encoder.pooling", "cls"}},
		{"static table from another encoder", func(t *testing.T) string {
			dir := copyDir(t, base)
			editManifest(t, dir, func(m map[string]any) {
				m["static"].(map[string]any)["distilled_from"].(map[string]any)["encoder_sha256"] = "0123abcd"
			})
			return dir
		}, []string{"static.distilled_from.encoder_sha256", "0123abcd", "re-run the notebook"}},
		{"unknown text filter", func(t *testing.T) string {
			dir := copyDir(t, base)
			editManifest(t, dir, func(m map[string]any) { m["text_filter"] = "stopwords_v9" })
			return dir
		}, []string{"text_filter", "stopwords_v9", NoiseFilter}},
		{"unknown head feature", func(t *testing.T) string {
			dir := copyDir(t, base)
			editManifest(t, dir, func(m map[string]any) {
				m["head"].(map[string]any)["features"] = []string{FeatureMeanPooled, "sentiment"}
			})
			return dir
		}, []string{"head.features", "sentiment"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadManifest(tc.dir(t))
			require.Error(t, err)
			for _, w := range tc.want {
				require.ErrorContains(t, err, w)
			}
		})
	}
}
