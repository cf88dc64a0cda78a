// Command mutants runs a small mutation test: for each mutant listed in a
// file it replaces one exact piece of source code, runs the named packages'
// tests, and records whether the suite noticed (killed) or not (survived),
// restoring the file afterwards. `make mutants` runs it over
// scripts/mutants.txt; the score goes into docs/testing.md.
//
// The list format is one mutant per block, blocks separated by blank
// lines, lines starting with '#' ignored:
//
//	name: short description of the behaviour change
//	file: path/to/file.go
//	pkgs: ./pkg/... ./other
//	run: optional -run regexp
//	old: exact code (one line; \n for newlines, \t for tabs)
//	new: replacement code
//
// "old" must occur exactly once in the file, so that a mutant that no
// longer applies (the code moved on) is reported as stale, never silently
// skipped.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

type mutant struct {
	name, file, run, old, new string
	pkgs                      []string
}

func main() {
	list := flag.String("list", "scripts/mutants.txt", "mutant list")
	only := flag.String("only", "", "run only mutants whose name contains this")
	timeout := flag.Duration("timeout", 10*time.Minute, "time limit of one mutant's test run")
	flag.Parse()
	ms, err := parse(*list)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mutants:", err)
		os.Exit(2)
	}
	killed, survived, stale := 0, 0, 0
	for _, m := range ms {
		if *only != "" && !strings.Contains(m.name, *only) {
			continue
		}
		res, err := runOne(m, *timeout)
		switch {
		case err != nil:
			stale++
			fmt.Printf("STALE    %-40s %v\n", m.name, err)
		case res:
			killed++
			fmt.Printf("killed   %s\n", m.name)
		default:
			survived++
			fmt.Printf("SURVIVED %-40s %s\n", m.name, m.file)
		}
	}
	total := killed + survived
	fmt.Printf("\nscore: %d of %d mutants killed", killed, total)
	if total > 0 {
		fmt.Printf(" (%.0f%%)", 100*float64(killed)/float64(total))
	}
	fmt.Printf("; %d stale\n", stale)
	if survived > 0 || stale > 0 {
		os.Exit(1)
	}
}

// runOne applies m, runs its packages' tests and restores the file; it
// reports whether the tests failed (the mutant was killed).
func runOne(m mutant, timeout time.Duration) (bool, error) {
	orig, err := os.ReadFile(m.file)
	if err != nil {
		return false, err
	}
	src := string(orig)
	if n := strings.Count(src, m.old); n != 1 {
		return false, fmt.Errorf("old code occurs %d times in %s", n, m.file)
	}
	st, err := os.Stat(m.file)
	if err != nil {
		return false, err
	}
	if err := os.WriteFile(m.file, []byte(strings.Replace(src, m.old, m.new, 1)), st.Mode()); err != nil {
		return false, err
	}
	defer func() {
		if err := os.WriteFile(m.file, orig, st.Mode()); err != nil {
			fmt.Fprintln(os.Stderr, "mutants: CANNOT RESTORE", m.file, err)
			os.Exit(3)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	args := []string{"test", "-count=1", "-failfast"}
	if m.run != "" {
		args = append(args, "-run", m.run)
	}
	cmd := exec.CommandContext(ctx, "go", append(args, m.pkgs...)...)
	out, err := cmd.CombinedOutput()
	if err == nil {
		return false, nil
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false, err
	}
	if strings.Contains(string(out), "[build failed]") || strings.Contains(string(out), "[setup failed]") {
		return false, fmt.Errorf("the mutant does not compile:\n%s", out)
	}
	return true, nil
}

func parse(path string) ([]mutant, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []mutant
	cur := mutant{}
	flush := func() error {
		if cur.name == "" && cur.file == "" && cur.old == "" && cur.pkgs == nil {
			return nil
		}
		if cur.name == "" || cur.file == "" || cur.old == "" || len(cur.pkgs) == 0 {
			return fmt.Errorf("mutant %q lacks name, file, pkgs or old", cur.name)
		}
		out = append(out, cur)
		cur = mutant{}
		return nil
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	unescape := strings.NewReplacer(`\n`, "\n", `\t`, "\t")
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		if strings.TrimSpace(line) == "" {
			if err := flush(); err != nil {
				return nil, err
			}
			continue
		}
		key, val, ok := strings.Cut(line, ": ")
		if !ok {
			key, val = strings.TrimSuffix(line, ":"), ""
		}
		switch key {
		case "name":
			cur.name = val
		case "file":
			cur.file = val
		case "pkgs":
			cur.pkgs = strings.Fields(val)
		case "run":
			cur.run = val
		case "old":
			cur.old = unescape.Replace(val)
		case "new":
			cur.new = unescape.Replace(val)
		default:
			return nil, fmt.Errorf("%s: unknown key %q", path, key)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, flush()
}
