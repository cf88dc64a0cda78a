package main

// `termivar-coord version` and `termivar-coord completion bash|zsh|fish`.
// The completion scripts are generated from the static command tables
// (commands in main.go, clientCommands in cli.go), serve's flag set and
// the client commands' global flags, so a new command or flag completes
// without touching this file.

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/termivar/distributed/internal/buildinfo"
)

// buildJSON is the build information of version --json and status --json.
type buildJSON struct {
	ModuleVersion string `json:"module_version"`
	VCSRevision   string `json:"vcs_revision"`
	VCSModified   bool   `json:"vcs_modified"`
	VCSTime       string `json:"vcs_time,omitempty"`
	GoVersion     string `json:"go_version"`
}

func toBuildJSON(in buildinfo.Info) buildJSON {
	return buildJSON{ModuleVersion: in.ModuleVersion, VCSRevision: in.VCSRevision, VCSModified: in.VCSModified,
		VCSTime: in.VCSTime, GoVersion: in.GoVersion}
}

func runVersion(args []string) int { return versionTo(os.Stdout, os.Stderr, args) }

func versionTo(stdout, stderr io.Writer, args []string) int {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: termivar-coord version [--json]")
		return exitUsage
	}
	in := buildinfo.Read()
	if *asJSON {
		_ = json.NewEncoder(stdout).Encode(toBuildJSON(in))
		return exitOK
	}
	fmt.Fprintln(stdout, in.String())
	return exitOK
}

// completionShells are the shells `completion` writes scripts for.
var completionShells = []string{"bash", "zsh", "fish"}

func runCompletion(args []string) int { return completionTo(os.Stdout, os.Stderr, args) }

func completionTo(stdout, stderr io.Writer, args []string) int {
	if len(args) != 1 {
		fmt.Fprintln(stderr, "usage: termivar-coord completion bash|zsh|fish")
		return exitUsage
	}
	write, ok := map[string]func(io.Writer, completion){"bash": writeBashCompletion, "zsh": writeZshCompletion, "fish": writeFishCompletion}[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "termivar-coord completion: unknown shell %q (want bash, zsh or fish)\n", args[0])
		return exitUsage
	}
	write(stdout, completionTable())
	return exitOK
}

// completionTable lists every command and, per command, the words that
// may follow it: subcommands and flags.
type completion struct {
	commands []string
	words    map[string][]string
}

// subcommands are the fixed first arguments of commands that take one.
var subcommands = map[string][]string{
	"keys":       {"create", "list", "revoke", "rotate"},
	"tenants":    {"create", "update"},
	"scans":      {"delete"},
	"schedules":  {"create", "list", "delete"},
	"cluster":    {"members", "add", "remove", "transfer-leadership"},
	"completion": completionShells,
}

func completionTable() completion {
	t := completion{words: map[string][]string{}}
	for _, c := range commands() {
		t.commands = append(t.commands, c.name)
		t.words[c.name] = append([]string(nil), subcommands[c.name]...)
	}
	var sf serveFlags
	t.words["serve"] = append(t.words["serve"], flagNames(newServeFlagSet(&sf))...)
	t.words["version"] = append(t.words["version"], "--json")
	env := &cliEnv{stdout: io.Discard, stderr: io.Discard}
	for _, c := range clientCommands() {
		t.commands = append(t.commands, c.name)
		var g globalFlags
		t.words[c.name] = append(append([]string(nil), subcommands[c.name]...), flagNames(newFlagSet(env, c, &g, true))...)
	}
	t.commands = append(t.commands, "help")
	return t
}

// flagNames are fs's flags as --name, sorted.
func flagNames(fs *flag.FlagSet) []string {
	var out []string
	fs.VisitAll(func(f *flag.Flag) { out = append(out, "--"+f.Name) })
	sort.Strings(out)
	return out
}

func writeBashCompletion(w io.Writer, t completion) {
	fmt.Fprintln(w, "# bash completion for termivar-coord: source <(termivar-coord completion bash)")
	fmt.Fprintln(w, "_termivar_coord() {")
	fmt.Fprintln(w, `  local cur="${COMP_WORDS[COMP_CWORD]}" words=""`)
	fmt.Fprintln(w, `  if [ "$COMP_CWORD" -eq 1 ]; then`)
	fmt.Fprintf(w, "    COMPREPLY=($(compgen -W %q -- \"$cur\"))\n", strings.Join(t.commands, " "))
	fmt.Fprintln(w, "    return")
	fmt.Fprintln(w, "  fi")
	fmt.Fprintln(w, `  case "${COMP_WORDS[1]}" in`)
	for _, c := range slices.Sorted(slices.Values(t.commands)) {
		if len(t.words[c]) > 0 {
			fmt.Fprintf(w, "    %s) words=%q ;;\n", c, strings.Join(t.words[c], " "))
		}
	}
	fmt.Fprintln(w, "  esac")
	fmt.Fprintln(w, `  COMPREPLY=($(compgen -W "$words" -- "$cur"))`)
	fmt.Fprintln(w, "}")
	fmt.Fprintln(w, "complete -o default -F _termivar_coord termivar-coord")
}

func writeZshCompletion(w io.Writer, t completion) {
	fmt.Fprintln(w, "#compdef termivar-coord")
	fmt.Fprintln(w, "# zsh completion for termivar-coord: source <(termivar-coord completion zsh), or save as _termivar-coord in $fpath")
	fmt.Fprintln(w, "_termivar-coord() {")
	fmt.Fprintln(w, "  if (( CURRENT == 2 )); then")
	fmt.Fprintf(w, "    compadd -- %s\n", strings.Join(t.commands, " "))
	fmt.Fprintln(w, "    return")
	fmt.Fprintln(w, "  fi")
	fmt.Fprintln(w, "  case $words[2] in")
	for _, c := range slices.Sorted(slices.Values(t.commands)) {
		if len(t.words[c]) > 0 {
			fmt.Fprintf(w, "    %s) compadd -- %s ;;\n", c, strings.Join(t.words[c], " "))
		}
	}
	fmt.Fprintln(w, "    *) _files ;;")
	fmt.Fprintln(w, "  esac")
	fmt.Fprintln(w, "}")
	fmt.Fprintln(w, `if [ "$funcstack[1]" = "_termivar-coord" ]; then _termivar-coord "$@"; else compdef _termivar-coord termivar-coord; fi`)
}

func writeFishCompletion(w io.Writer, t completion) {
	fmt.Fprintln(w, "# fish completion for termivar-coord: termivar-coord completion fish | source")
	fmt.Fprintln(w, "complete -c termivar-coord -f")
	fmt.Fprintf(w, "complete -c termivar-coord -n __fish_use_subcommand -a '%s'\n", strings.Join(t.commands, " "))
	for _, c := range slices.Sorted(slices.Values(t.commands)) {
		var args, flags []string
		for _, word := range t.words[c] {
			if name, ok := strings.CutPrefix(word, "--"); ok {
				flags = append(flags, name)
			} else {
				args = append(args, word)
			}
		}
		cond := "'__fish_seen_subcommand_from " + c + "'"
		if len(args) > 0 {
			fmt.Fprintf(w, "complete -c termivar-coord -n %s -a '%s'\n", cond, strings.Join(args, " "))
		}
		for _, f := range flags {
			fmt.Fprintf(w, "complete -c termivar-coord -n %s -l %s\n", cond, f)
		}
	}
}
