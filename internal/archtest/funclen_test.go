package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// maxFuncLines is the longest a function outside tests may be, from its
// func line to its closing brace.
const maxFuncLines = 80

// Functions outside tests are short enough to read at once.
func TestNoLongFunctions(t *testing.T) {
	root := repoRoot(t)
	fset := token.NewFileSet()
	for _, f := range trackedFiles(t, root) {
		if !strings.HasSuffix(f, ".go") || strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, filepath.Join(root, f), nil, parser.SkipObjectResolution)
		if err != nil {
			continue // deleted in the work tree, or not Go this toolchain parses
		}
		for _, d := range file.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			start, end := fset.Position(fd.Pos()).Line, fset.Position(fd.End()).Line
			if n := end - start + 1; n > maxFuncLines {
				name := fd.Name.Name
				if fd.Recv != nil && len(fd.Recv.List) == 1 {
					name = types(fd.Recv.List[0].Type) + "." + name
				}
				t.Errorf("%s:%d: %s is %d lines, over %d", f, start, name, n, maxFuncLines)
			}
		}
	}
}

// types names a receiver's type: T for T and *T, also with type parameters.
func types(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.StarExpr:
		return types(x.X)
	case *ast.IndexExpr:
		return types(x.X)
	case *ast.IndexListExpr:
		return types(x.X)
	case *ast.Ident:
		return x.Name
	}
	return "?"
}
