package config

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDocNamesEverySection keeps the package documentation's list of sections in step with
// Config: it once named 9 of 13.
func TestDocNamesEverySection(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	require.NoError(t, err)
	purpose, _, ok := strings.Cut(string(doc), "// [Load]")
	require.True(t, ok, "doc.go describes Load after the sections")
	typ := reflect.TypeFor[Config]()
	for i := range typ.NumField() {
		key, _, _ := strings.Cut(typ.Field(i).Tag.Get("yaml"), ",")
		require.Regexp(t, `\b`+key+`\b`, purpose, "doc.go names section %q", key)
	}
}
