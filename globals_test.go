package distributed

// Goal: no package of the module exports a mutable package variable
// (ARCHITECTURE.md, "Seams"; issue 10): another package
// could change it under every user. Sentinel errors (Err…) are the one
// exception, as in the standard library. Method: parse every non-test,
// non-generated Go file under the module root and list its exported
// package-level vars.

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

func TestNoExportedMutableVars(t *testing.T) {
	fset := token.NewFileSet()
	checked := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (path == "gen" || path == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != "." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		checked++
		for _, decl := range f.Decls {
			g, ok := decl.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, spec := range g.Specs {
				for _, n := range spec.(*ast.ValueSpec).Names {
					if n.IsExported() && !strings.HasPrefix(n.Name, "Err") {
						t.Errorf("%s: exported package variable %s: make it a constant or a function", fset.Position(n.Pos()), n.Name)
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 50 {
		t.Fatalf("checked only %d files: is the walk rooted at the module?", checked)
	}
}
