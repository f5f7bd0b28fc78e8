package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// maxFuncLines is the longest a function of triage-bench or of the
// benchmark library may be, from its func line to its closing brace.
// Longer ones mixed measuring, tallying and reporting in one body; they
// were split so each step can be read (and tested) on its own.
const maxFuncLines = 80

// TestFunctionLength keeps every function in this directory and in the
// packages under bench/ (tests included) within maxFuncLines.
func TestFunctionLength(t *testing.T) {
	fset := token.NewFileSet()
	files := 0
	for _, root := range []string{".", "../../bench"} {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
				return err
			}
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				return err
			}
			files++
			for _, decl := range f.Decls {
				fn, ok := decl.(*ast.FuncDecl)
				if !ok {
					continue
				}
				start, end := fset.Position(fn.Pos()), fset.Position(fn.End())
				if n := end.Line - start.Line + 1; n > maxFuncLines {
					t.Errorf("%s:%d: %s is %d lines, more than %d", path, start.Line, funcName(fn), n, maxFuncLines)
				}
			}
			return nil
		})
		require.NoError(t, err)
	}
	require.Greater(t, files, 20, "the walk found the sources")
}

// funcName is "Name" for a function and "Type.Name" for a method.
func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	typ := fn.Recv.List[0].Type
	if star, ok := typ.(*ast.StarExpr); ok {
		typ = star.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return id.Name + "." + fn.Name.Name
	}
	return fn.Name.Name
}
