// Tests for the client command table. Goal: every row is complete and
// unique, every row's --help prints its own usage line and exits 0, and the
// top-level help lists every row in table order. Method: walk
// clientCommands and run each command in process with --help (no server).
package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestClientCommands_Table(t *testing.T) {
	seen := map[string]bool{}
	help := registeredUsage()
	last := -1
	for _, c := range clientCommands() {
		if c.name == "" || c.usage == "" || c.summary == "" || c.run == nil {
			t.Errorf("row %q is incomplete: %+v", c.name, c)
		}
		if seen[c.name] {
			t.Errorf("row %q appears twice", c.name)
		}
		seen[c.name] = true
		if got := clientCommandNamed(c.name); got.name != c.name || got.usage != c.usage {
			t.Errorf("clientCommandNamed(%q) = %+v", c.name, got)
		}
		i := strings.Index(help, "  "+c.name+" ")
		if i <= last {
			t.Errorf("top-level help lists %q at %d, after %d: not in table order\n%s", c.name, i, last, help)
		}
		last = i
	}
	if _, ok := lookupCommand("nonesuch"); ok {
		t.Error(`lookupCommand("nonesuch") found a row`)
	}
}

// TestClientCommands_Help: each command answers --help with its usage line
// and exit code 0.
func TestClientCommands_Help(t *testing.T) {
	for _, c := range clientCommands() {
		var out, errOut bytes.Buffer
		env := &cliEnv{stdin: strings.NewReader(""), stdout: &out, stderr: &errOut}
		code, ok := runRegistered(c.name, []string{"--help"}, env)
		if !ok || code != exitOK {
			t.Errorf("%s --help = %d, %v, want 0, true; stderr:\n%s", c.name, code, ok, errOut.String())
		}
		want := c.usage
		if c.name == "cluster" || c.name == "scans" {
			want = "termivar-coord " + c.name + " " // these print their own subcommand lists
		}
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("%s --help printed\n%s\nwant it to contain %q", c.name, errOut.String(), want)
		}
	}
}
