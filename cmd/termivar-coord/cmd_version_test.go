// Goal: `version`, `completion` and the build line of `status` tell the
// truth about this binary. Method: version's text and JSON are compared
// with runtime.Version; the bash script is sourced into a real bash and
// asked to complete partial words, and so are the zsh and fish scripts in
// real zsh and fish (CI installs them); the scripts must also offer
// every command of the tables and every serve flag; `status --json`
// against an in-process node reports that node's Go version.
package main

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

func TestVersion_PrintsBuild(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	if code := versionTo(&out, &errOut, nil); code != exitOK {
		t.Fatalf("version = exit %d: %s", code, errOut.String())
	}
	if s := out.String(); !strings.HasPrefix(s, "termivar-coord ") || !strings.Contains(s, runtime.Version()) {
		t.Errorf("version = %q, want the Go version %s", s, runtime.Version())
	}
	out.Reset()
	if code := versionTo(&out, &errOut, []string{"--json"}); code != exitOK {
		t.Fatalf("version --json = exit %d", code)
	}
	var b buildJSON
	if err := json.Unmarshal(out.Bytes(), &b); err != nil || b.GoVersion != runtime.Version() || b.ModuleVersion == "" {
		t.Errorf("version --json = %q (%v), want go_version %s and a module version", out.String(), err, runtime.Version())
	}
	if code := versionTo(&out, &errOut, []string{"extra"}); code != exitUsage {
		t.Errorf("version extra = exit %d, want %d", code, exitUsage)
	}
}

// bashComplete sources the bash script and completes line (the words
// typed so far, the last one partial).
func bashComplete(t *testing.T, script string, line ...string) []string {
	t.Helper()
	quoted := make([]string, len(line))
	for i, w := range line {
		quoted[i] = "'" + w + "'"
	}
	prog := script + "\nCOMP_WORDS=(" + strings.Join(quoted, " ") + ")\nCOMP_CWORD=" +
		itoa(len(line)-1) + "\n_termivar_coord\necho \"${COMPREPLY[*]}\"\n"
	out, err := exec.Command("bash", "--norc", "--noprofile", "-c", prog).CombinedOutput()
	if err != nil {
		t.Fatalf("bash: %v\n%s", err, out)
	}
	return strings.Fields(string(out))
}

func itoa(n int) string { return strconv.Itoa(n) }

// completionCases are partial command lines (the last word partial) and
// the words every shell's script must offer for them.
var completionCases = []struct {
	line []string
	want string
}{
	{[]string{"termivar-coord", "se"}, "serve"},
	{[]string{"termivar-coord", "comp"}, "completion"},
	{[]string{"termivar-coord", "serve", "--metrics-"}, "--metrics-addr --metrics-scans"},
	{[]string{"termivar-coord", "serve", "--log-f"}, "--log-format"},
	{[]string{"termivar-coord", "keys", "r"}, "revoke rotate"},
	{[]string{"termivar-coord", "tenants", "u"}, "update"},
	{[]string{"termivar-coord", "scans", "d"}, "delete"},
	{[]string{"termivar-coord", "schedules", "d"}, "delete"},
	{[]string{"termivar-coord", "completion", "f"}, "fish"},
	{[]string{"termivar-coord", "status", "--js"}, "--json"},
}

func TestCompletion_Bash(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	if code := completionTo(&out, &errOut, []string{"bash"}); code != exitOK {
		t.Fatalf("completion bash = exit %d: %s", code, errOut.String())
	}
	script := out.String()
	for _, c := range completionCases {
		if got := strings.Join(bashComplete(t, script, c.line...), " "); got != c.want {
			t.Errorf("complete %v = %q, want %q", c.line, got, c.want)
		}
	}
}

func TestCompletion_ZshFishCoverTables(t *testing.T) {
	t.Parallel()
	var want []string
	for _, c := range commands() {
		want = append(want, c.name)
	}
	for _, c := range clientCommands() {
		want = append(want, c.name)
	}
	var sf serveFlags
	serveFlagNames := flagNames(newServeFlagSet(&sf))
	for _, shell := range []string{"zsh", "fish"} {
		var out, errOut bytes.Buffer
		if code := completionTo(&out, &errOut, []string{shell}); code != exitOK {
			t.Fatalf("completion %s = exit %d", shell, code)
		}
		s := out.String()
		for _, w := range want {
			if !strings.Contains(s, " "+w) {
				t.Errorf("%s script lacks command %s", shell, w)
			}
		}
		for _, f := range serveFlagNames {
			name := f
			if shell == "fish" {
				name = "-l " + strings.TrimPrefix(f, "--")
			}
			if !strings.Contains(s, name) {
				t.Errorf("%s script lacks serve flag %s", shell, f)
			}
		}
	}
	var out, errOut bytes.Buffer
	if code := completionTo(&out, &errOut, []string{"tcsh"}); code != exitUsage || out.Len() != 0 {
		t.Errorf("completion tcsh = exit %d with %d bytes, want %d and nothing", code, out.Len(), exitUsage)
	}
}

func TestStatus_ShowsNodeBuild(t *testing.T) {
	t.Parallel()
	o := startObsNode(t)
	var out, errOut bytes.Buffer
	env := &cliEnv{stdout: &out, stderr: &errOut, server: o.tn.url, key: o.adminKey}
	if code, _ := runRegistered("status", []string{"--json"}, env); code != exitOK {
		t.Fatalf("status --json = exit %d: %s", code, errOut.String())
	}
	var s statusJSON
	if err := json.Unmarshal(out.Bytes(), &s); err != nil || s.Build == nil || s.Build.GoVersion != runtime.Version() {
		t.Fatalf("status --json = %s (%v), want build.go_version %s", out.String(), err, runtime.Version())
	}
	out.Reset()
	if code, _ := runRegistered("status", nil, env); code != exitOK || !strings.Contains(out.String(), "termivar-coord (") || !strings.HasPrefix(lastLine(out.String()), "build") {
		t.Errorf("status = exit %d:\n%s\nwant a build line", code, out.String())
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

// shellPath returns the named shell, or skips (fails under
// TERMIVAR_REQUIRE_SHELLS=1, as in CI, which installs zsh and fish) when
// it is not installed.
func shellPath(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	missing := ""
	if err != nil {
		missing = name + " is not installed (apt-get install " + name + ")"
	}
	return requireOrSkip(t, "TERMIVAR_REQUIRE_SHELLS", path, missing)
}

// zshComplete sources the zsh script into a real zsh and runs its
// completion function for line (the last word partial). compadd is
// replaced by a function that prints the offered words matching the
// prefix, as zsh's completion system would show them; _files prints
// FILES.
func zshComplete(t *testing.T, zsh, script string, line ...string) []string {
	t.Helper()
	prog := "compdef() { :; }\n" + script + "\n" +
		`compadd() { [[ $1 == -- ]] && shift; for w in "$@"; do [[ $w == ${PREFIX}* ]] && print -r -- $w; done; return 0; }` + "\n" +
		"_files() { print FILES; }\nwords=(" + strings.Join(line, " ") + ")\nCURRENT=" + itoa(len(line)) +
		"\nPREFIX=" + line[len(line)-1] + "\n_termivar-coord\n"
	out, err := exec.Command(zsh, "-f", "-c", prog).CombinedOutput()
	if err != nil {
		t.Fatalf("zsh: %v\n%s", err, out)
	}
	return strings.Fields(string(out))
}

// fishComplete loads the fish script into a real fish and asks fish's own
// completion engine (complete -C) for line.
func fishComplete(t *testing.T, fish, script string, line string) []string {
	t.Helper()
	cmd := exec.Command(fish, "--no-config", "-c", "source; complete -C "+strconv.Quote(line))
	cmd.Stdin = strings.NewReader(script)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("fish: %v\n%s", err, out)
	}
	var words []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if w, _, _ := strings.Cut(l, "\t"); w != "" {
			words = append(words, w)
		}
	}
	return words
}

// The zsh and fish scripts run in the real shells and offer the same
// completions as the bash script.
func TestCompletion_ZshAndFishInRealShells(t *testing.T) {
	t.Parallel()
	zsh, fish := shellPath(t, "zsh"), shellPath(t, "fish")
	scripts := map[string]string{}
	for _, shell := range []string{"zsh", "fish"} {
		var out, errOut bytes.Buffer
		if code := completionTo(&out, &errOut, []string{shell}); code != exitOK {
			t.Fatalf("completion %s = exit %d: %s", shell, code, errOut.String())
		}
		scripts[shell] = out.String()
	}
	for _, c := range completionCases {
		if got := strings.Join(zshComplete(t, zsh, scripts["zsh"], c.line...), " "); got != c.want {
			t.Errorf("zsh: complete %v = %q, want %q", c.line, got, c.want)
		}
		if got := strings.Join(fishComplete(t, fish, scripts["fish"], strings.Join(c.line, " ")), " "); got != c.want {
			t.Errorf("fish: complete %v = %q, want %q", c.line, got, c.want)
		}
	}
}
