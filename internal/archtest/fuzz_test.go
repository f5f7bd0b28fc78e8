package archtest

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestEveryFuzzTargetFuzzesInCI keeps the Makefile's FUZZ_TARGETS (what make test-fuzz runs)
// equal to the Fuzz functions in the tree: a target missing from the list only replays its
// seeds and never fuzzes, which is how two of them went unnoticed.
func TestEveryFuzzTargetFuzzesInCI(t *testing.T) {
	root := filepath.Join("..", "..")
	fuzzFunc := regexp.MustCompile(`(?m)^func (Fuzz\w+)\(\w+ \*testing\.F\)`)
	var inTree []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != root || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		for _, m := range fuzzFunc.FindAllSubmatch(src, -1) {
			inTree = append(inTree, filepath.ToSlash(rel)+":"+string(m[1]))
		}
		return nil
	})
	require.NoError(t, err)
	require.NotEmpty(t, inTree)

	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	require.NoError(t, err)
	listed := makeList(t, string(mk), "FUZZ_TARGETS")
	slices.Sort(inTree)
	slices.Sort(listed)
	require.Equal(t, inTree, listed, "the Makefile's FUZZ_TARGETS must name every Fuzz function as package-dir:Name")
}

// makeList returns the words of a Makefile variable assigned with := over continued lines.
func makeList(t *testing.T, mk, name string) []string {
	t.Helper()
	start := strings.Index(mk, "\n"+name+" :=")
	require.GreaterOrEqual(t, start, 0, "%s not found in the Makefile", name)
	var words []string
	for _, line := range strings.Split(mk[start+1:], "\n") {
		line = strings.TrimPrefix(line, name+" :=")
		cont := strings.HasSuffix(strings.TrimSpace(line), `\`)
		words = append(words, strings.Fields(strings.TrimSuffix(strings.TrimSpace(line), `\`))...)
		if !cont {
			break
		}
	}
	return words
}
