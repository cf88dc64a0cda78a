// Goal: the error registry (kindCodes) maps every kind that exists in code
// to the Connect code the API documents, and nothing else. Method: a golden
// file pins every kind → code pair (so a changed value, e.g. lease_expired
// mapped to Aborted instead of FailedPrecondition, fails); the kinds in
// code are collected from the core's and the FSM's AllErrorKinds and from
// this package's Kind constants, read from its source files, and compared
// with the registry in both directions; an apiError built with a kind that
// is not such a constant fails too.
package server

import (
	"flag"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	distributed "github.com/termivar/distributed"
	"github.com/termivar/distributed/raftfsm"
)

var updateGolden = flag.Bool("update-golden", false, "rewrite testdata/kind_codes.golden from the registry")

const kindCodesGolden = "testdata/kind_codes.golden"

// renderKindCodes is the registry as sorted "kind code" lines.
func renderKindCodes() string {
	lines := make([]string, 0, len(kindCodes))
	for k, c := range kindCodes {
		lines = append(lines, k+" "+c.String())
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n") + "\n"
}

func TestKindCodes_Golden(t *testing.T) {
	got := renderKindCodes()
	if *updateGolden {
		if err := os.WriteFile(kindCodesGolden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(kindCodesGolden)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("registry differs from %s (rerun with -update-golden only if the change is intended):\n got:\n%s\nwant:\n%s", kindCodesGolden, got, want)
	}
}

// serverKinds returns the values of this package's string constants named
// Kind*, read from its non-test source files.
func serverKinds(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if cl, ok := n.(*ast.CompositeLit); ok {
				checkAPIErrorLiteral(t, fset, cl)
			}
			vs, ok := n.(*ast.ValueSpec)
			if !ok {
				return true
			}
			for i, id := range vs.Names {
				if !strings.HasPrefix(id.Name, "Kind") || i >= len(vs.Values) {
					continue
				}
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					v, _ := strconv.Unquote(lit.Value)
					out = append(out, v)
				}
			}
			return true
		})
	}
	return out
}

// checkAPIErrorLiteral fails the test when an apiError literal names its
// kind by anything but a Kind constant (which the registry must hold).
func checkAPIErrorLiteral(t *testing.T, fset *token.FileSet, cl *ast.CompositeLit) {
	t.Helper()
	if id, ok := cl.Type.(*ast.Ident); !ok || id.Name != "apiError" || len(cl.Elts) == 0 {
		return
	}
	if k, ok := cl.Elts[0].(*ast.Ident); !ok || !strings.HasPrefix(k.Name, "Kind") {
		t.Errorf("%s: apiError literal whose kind is not a Kind constant", fset.Position(cl.Pos()))
	}
}

func TestKindCodes_Complete(t *testing.T) {
	inCode := map[string]string{}
	for _, k := range distributed.AllErrorKinds() {
		inCode[k.String()] = "core"
	}
	for _, k := range raftfsm.AllErrorKinds() {
		inCode[k.String()] = "raftfsm"
	}
	sk := serverKinds(t)
	if len(sk) < 10 {
		t.Fatalf("found %d Kind constants in server/*.go, want the node's kinds", len(sk))
	}
	for _, k := range sk {
		inCode[k] = "server"
	}
	for k, from := range inCode {
		if _, ok := kindCodes[k]; !ok {
			t.Errorf("%s kind %q has no Connect code in the registry", from, k)
		}
	}
	for k := range kindCodes {
		if _, ok := inCode[k]; !ok {
			t.Errorf("registry kind %q is not a kind of the core, the FSM or the server", k)
		}
	}
}

// TestClassify_CodeIsTheRegistrys: every error classify sees gets the
// registry's code for the kind it puts in the detail.
func TestClassify_CodeIsTheRegistrys(t *testing.T) {
	errs := []error{
		&distributed.Error{Kind: distributed.KindLeaseExpired},
		&raftfsm.Error{Kind: raftfsm.KindKeyLimit},
		&apiError{KindSoleVoter, "x"},
		errUnauthenticated("x"),
	}
	for _, err := range errs {
		code, d := classify(err)
		if want, ok := kindCodes[d.GetKind()]; !ok || code != want {
			t.Errorf("classify(%v) = %v %q, want the registry's %v", err, code, d.GetKind(), want)
		}
	}
}
