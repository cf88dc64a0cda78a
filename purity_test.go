package distributed

// Goal: the core stays pure (contract A.1; ARCHITECTURE.md, Layers). This test parses every
// non-test file of the root package and fails on an import that could do
// I/O, read a clock, spawn work or draw randomness, and on any use of the
// time package (the core has no business with wall-clock time at all).

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strconv"
	"strings"
	"testing"
)

var forbiddenImports = map[string]string{
	"os": "I/O", "net": "I/O", "net/http": "I/O", "io/fs": "I/O", "path/filepath": "I/O", "syscall": "I/O",
	"context": "context belongs to shells", "log": "logging belongs to shells",
	"math/rand": "randomness", "math/rand/v2": "randomness", "crypto/rand": "randomness",
	"time": "clocks", "runtime": "scheduling", "os/exec": "processes", "unsafe": "memory safety",
}

var allowedThirdParty = map[string]bool{"github.com/google/btree": true}

func TestCorePurity(t *testing.T) {
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if why, bad := forbiddenImports[path]; bad {
				t.Errorf("%s imports %q (%s)", name, path, why)
			}
			if strings.Contains(strings.SplitN(path, "/", 2)[0], ".") && !allowedThirdParty[path] {
				t.Errorf("%s imports third-party %q", name, path)
			}
		}
		full, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(full, func(n ast.Node) bool {
			if g, ok := n.(*ast.GoStmt); ok {
				t.Errorf("%s starts a goroutine at %v", name, fset.Position(g.Pos()))
			}
			return true
		})
	}
	if checked < 10 {
		t.Fatalf("checked only %d files", checked)
	}
}
