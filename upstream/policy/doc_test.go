package policy

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDocNamesEveryPolicy keeps the package documentation's list of policies, and the
// list of Finishers in New's comment, in step with the registry: both once went stale.
func TestDocNamesEveryPolicy(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	require.NoError(t, err)
	registry, err := os.ReadFile("registry.go")
	require.NoError(t, err)
	text := strings.Join(strings.Fields(string(doc)), " ")
	_, newDoc, ok := strings.Cut(string(registry), "// New validates")
	require.True(t, ok, "registry.go documents New")
	newDoc, _, _ = strings.Cut(newDoc, "func New(")
	for _, name := range Names() {
		require.Contains(t, text, name, "doc.go lists every policy name")

		cfg := DefaultConfig()
		cfg.Name = name
		p, err := New(cfg, Env{})
		require.NoError(t, err)
		if _, ok := p.(Finisher); ok {
			require.Contains(t, newDoc, name, "New's comment in registry.go names every Finisher")
		}
	}
}
