package server

// Goal: the FSM's response value is reached only through typed helpers
// (raftfsm.ValueAs), so a type mismatch is an error naming the operation,
// never a panic. Method: parse every non-test file of this package and fail
// on a type assertion on a field named Value (r.Value.(T)); the checker is
// first shown to find one in a snippet, so it cannot pass vacuously.

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// bareValueAssertions returns the positions of x.Value.(T) in f.
func bareValueAssertions(f *ast.File) []token.Pos {
	var out []token.Pos
	ast.Inspect(f, func(n ast.Node) bool {
		ta, ok := n.(*ast.TypeAssertExpr)
		if !ok {
			return true
		}
		if sel, ok := ta.X.(*ast.SelectorExpr); ok && sel.Sel.Name == "Value" {
			out = append(out, ta.Pos())
		}
		return true
	})
	return out
}

func TestServer_NoBareValueAssertions(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	probe, err := parser.ParseFile(fset, "probe.go", "package p\nfunc f(r struct{ Value any }) int { return r.Value.(int) }\n", 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(bareValueAssertions(probe)); got != 1 {
		t.Fatalf("bareValueAssertions(probe) found %d, want 1", got)
	}
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, pos := range bareValueAssertions(f) {
			t.Errorf("%v: bare type assertion on a Response value; use raftfsm.ValueAs", fset.Position(pos))
		}
	}
	if checked == 0 {
		t.Fatal("no source files checked")
	}
}
