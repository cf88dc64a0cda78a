// Tests of the packaging (Dockerfile, deploy/termivar-coord.service,
// deploy/serve.json) and of the health probe they use. Goal: the image and
// the unit reference only subcommands and flags the CLI has, with values
// its flag sets accept, and their paths and ports agree with each other
// (data dir = volume = state directory, exposed ports = listen ports, the
// health probe = the API port); the image is FROM scratch with a static
// binary and a non-root user, the unit carries the hardening options.
// Method: parse both files (no Docker daemon, no systemd) and parse every
// invocation with the subcommand's own flag set.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
)

// instruction is one Dockerfile instruction with continuation lines joined.
type instruction struct {
	op, args string
}

// parseDockerfile returns the instructions of a Dockerfile.
func parseDockerfile(t *testing.T, file string) []instruction {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []instruction
	var cur strings.Builder
	for _, line := range strings.Split(string(b), "\n") {
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if s, ok := strings.CutSuffix(trimmed, "\\"); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(trimmed)
		op, args, _ := strings.Cut(cur.String(), " ")
		out = append(out, instruction{strings.ToUpper(op), strings.TrimSpace(args)})
		cur.Reset()
	}
	return out
}

// execForm decodes a JSON exec-form argument list.
func execForm(t *testing.T, what, s string) []string {
	t.Helper()
	var v []string
	if err := json.Unmarshal([]byte(s), &v); err != nil || len(v) == 0 {
		t.Fatalf("%s %q is not a JSON exec form: %v", what, s, err)
	}
	return v
}

// cliFlagSets returns, for each subcommand the packaging may use, its flag
// set; the values parsed land in the returned structs.
type parsedInvocation struct {
	sub   string
	flags map[string]string // flag name → value as given
	fs    *flag.FlagSet
	serve *serveFlags
}

// parseInvocation checks that args (after the binary) name a subcommand
// of the command table and that every flag exists in its flag set and
// takes its value.
func parseInvocation(t *testing.T, where string, args []string) parsedInvocation {
	t.Helper()
	if len(args) == 0 {
		t.Fatalf("%s: no subcommand", where)
	}
	found := false
	for _, c := range commands() {
		found = found || c.name == args[0]
	}
	if _, ok := lookupCommand(args[0]); ok {
		found = true
	}
	if !found {
		t.Fatalf("%s: subcommand %q is not in the command table", where, args[0])
	}
	p := parsedInvocation{sub: args[0], flags: map[string]string{}}
	switch args[0] {
	case "serve":
		p.serve = &serveFlags{}
		p.fs = newServeFlagSet(p.serve)
	case "health":
		p.fs = newHealthFlagSet(&healthFlags{}, io.Discard)
	case "backup":
		var out string
		p.fs = newBackupFlagSet(&clientFlags{}, &out, io.Discard)
	case "restore":
		p.fs = newRestoreFlagSet(&restoreFlags{}, io.Discard)
	default:
		t.Fatalf("%s: the packaging test knows no flag set for %q; add it", where, args[0])
	}
	p.fs.SetOutput(io.Discard)
	if err := p.fs.Parse(args[1:]); err != nil {
		t.Fatalf("%s: %s flags %q: %v", where, args[0], args[1:], err)
	}
	if p.fs.NArg() > 0 {
		t.Fatalf("%s: %s has stray arguments %q", where, args[0], p.fs.Args())
	}
	p.fs.Visit(func(f *flag.Flag) { p.flags[f.Name] = f.Value.String() })
	return p
}

func port(t *testing.T, where, hostport string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(hostport)
	if err != nil {
		t.Fatalf("%s: %q is not host:port: %v", where, hostport, err)
	}
	return p
}

func TestPackaging_Dockerfile(t *testing.T) {
	ins := parseDockerfile(t, filepath.Join("..", "..", "Dockerfile"))
	stage := -1
	var froms []string
	final := map[string][]string{} // op → args of the final stage
	var buildRuns []string
	for _, in := range ins {
		if in.op == "FROM" {
			stage++
			froms = append(froms, in.args)
			clear(final)
			continue
		}
		final[in.op] = append(final[in.op], in.args)
		if in.op == "RUN" {
			buildRuns = append(buildRuns, in.args)
		}
	}
	if len(froms) < 2 || froms[len(froms)-1] != "scratch" {
		t.Fatalf("stages %q: want a build stage and a final FROM scratch", froms)
	}
	if len(final["RUN"]) > 0 {
		t.Errorf("the scratch stage has RUN %q (it has no shell)", final["RUN"])
	}
	// The binary: built static from ./cmd/termivar-coord, copied to the
	// path the entrypoint runs.
	var out string
	for _, r := range buildRuns {
		if strings.Contains(r, "go build") {
			if !strings.Contains(r, "CGO_ENABLED=0") || !strings.Contains(r, "./cmd/termivar-coord") {
				t.Errorf("build %q: want CGO_ENABLED=0 and ./cmd/termivar-coord", r)
			}
			f := strings.Fields(r)
			if i := slices.Index(f, "-o"); i >= 0 && i+1 < len(f) {
				out = f[i+1]
			}
		}
	}
	if out == "" {
		t.Fatal("no go build -o in the build stage")
	}
	entry := execForm(t, "ENTRYPOINT", last(t, final, "ENTRYPOINT"))
	copied := map[string]string{} // destination → source, final stage
	var dataChown string
	for _, c := range final["COPY"] {
		f := strings.Fields(c)
		var opts []string
		for len(f) > 0 && strings.HasPrefix(f[0], "--") {
			opts, f = append(opts, f[0]), f[1:]
		}
		if len(f) != 2 {
			t.Fatalf("COPY %q: want one source and one destination", c)
		}
		copied[f[1]] = f[0]
		for _, o := range opts {
			if v, ok := strings.CutPrefix(o, "--chown="); ok && f[1] == "/data" {
				dataChown = v
			}
		}
	}
	if len(entry) != 1 || copied[entry[0]] != out {
		t.Errorf("ENTRYPOINT %q runs a file not copied from the build output %q (copies: %v)", entry, out, copied)
	}
	user := last(t, final, "USER")
	if uid, _, _ := strings.Cut(user, ":"); uid == "0" || uid == "root" || user == "" {
		t.Errorf("USER %q: want a non-root user", user)
	}
	if dataChown != user {
		t.Errorf("/data is copied with --chown=%s, USER is %s: the node could not write its data dir", dataChown, user)
	}
	volumes := execForm(t, "VOLUME", last(t, final, "VOLUME"))
	exposed := strings.Fields(last(t, final, "EXPOSE"))

	cmd := execForm(t, "CMD", last(t, final, "CMD"))
	sv := parseInvocation(t, "Dockerfile CMD", cmd)
	if sv.sub != "serve" {
		t.Fatalf("CMD runs %q, want serve", sv.sub)
	}
	if !slices.Equal(volumes, []string{sv.serve.dataDir}) || copied[sv.serve.dataDir] == "" {
		t.Errorf("VOLUME %q, data dir %q, copied dirs %v: want the data dir to be the volume, created 0700 in the image", volumes, sv.serve.dataDir, copied)
	}
	apiPort, raftPort := port(t, "--api-addr", sv.serve.apiAddr), port(t, "--raft-addr", sv.serve.raftAddr)
	if !slices.Contains(exposed, apiPort) || !slices.Contains(exposed, raftPort) {
		t.Errorf("EXPOSE %q: want the API port %s and the raft port %s", exposed, apiPort, raftPort)
	}
	if h, _, _ := net.SplitHostPort(sv.serve.apiAddr); h != "0.0.0.0" {
		t.Errorf("--api-addr %q: a container must listen beyond its loopback", sv.serve.apiAddr)
	}

	hc := last(t, final, "HEALTHCHECK")
	_, hcCmd, ok := strings.Cut(hc, "CMD ")
	if !ok {
		t.Fatalf("HEALTHCHECK %q has no CMD", hc)
	}
	probe := execForm(t, "HEALTHCHECK CMD", hcCmd)
	if probe[0] != entry[0] {
		t.Errorf("HEALTHCHECK runs %q, not the binary %q", probe[0], entry[0])
	}
	hp := parseInvocation(t, "HEALTHCHECK", probe[1:])
	if hp.sub != "health" {
		t.Errorf("HEALTHCHECK runs %q, want health", hp.sub)
	}
	if got := port(t, "health --url", strings.TrimPrefix(hp.flags["url"], "http://")); got != apiPort {
		t.Errorf("health probes port %s, the API listens on %s", got, apiPort)
	}
}

// last returns the last argument of op in the stage, failing when there is
// none.
func last(t *testing.T, stage map[string][]string, op string) string {
	t.Helper()
	v := stage[op]
	if len(v) == 0 {
		t.Fatalf("the final stage has no %s", op)
	}
	return v[len(v)-1]
}

// parseUnit returns the key=value settings of a systemd unit; a key may
// repeat.
func parseUnit(t *testing.T, file string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "[") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: line %q is not key=value", file, line)
		}
		out[k] = append(out[k], v)
	}
	return out
}

func TestPackaging_SystemdUnit(t *testing.T) {
	u := parseUnit(t, filepath.Join("..", "..", "deploy", "termivar-coord.service"))
	one := func(k string) string {
		if len(u[k]) != 1 {
			t.Fatalf("unit: %s appears %d times, want once", k, len(u[k]))
		}
		return u[k][0]
	}
	for k, want := range map[string]string{
		"NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes",
		"PrivateDevices": "yes", "RestrictSUIDSGID": "yes", "CapabilityBoundingSet": "", "AmbientCapabilities": "",
		"UMask": "0077", "StateDirectoryMode": "0700",
	} {
		if got := one(k); got != want {
			t.Errorf("unit: %s=%s, want %s", k, got, want)
		}
	}
	if one("DynamicUser") != "yes" && len(u["User"]) == 0 {
		t.Error("unit: neither DynamicUser=yes nor a dedicated User=")
	}
	argv := strings.Fields(one("ExecStart"))
	if argv[0] != "/usr/local/bin/termivar-coord" {
		t.Errorf("ExecStart runs %q", argv[0])
	}
	sv := parseInvocation(t, "ExecStart", argv[1:])
	if sv.sub != "serve" {
		t.Fatalf("ExecStart runs %q, want serve", sv.sub)
	}
	if want := path.Join("/var/lib", one("StateDirectory")); sv.serve.dataDir != want {
		t.Errorf("--data-dir %q, StateDirectory gives %q: the only writable path under ProtectSystem=strict", sv.serve.dataDir, want)
	}
	cfg := sv.serve.configFile
	if dir := path.Join("/etc", one("ConfigurationDirectory")); path.Dir(cfg) != dir {
		t.Errorf("--config %q is not in ConfigurationDirectory %q", cfg, dir)
	}
	// The shipped example of that file: every key is a serve flag and
	// takes its value.
	example := filepath.Join("..", "..", "deploy", path.Base(cfg))
	var f serveFlags
	fs := newServeFlagSet(&f)
	fs.SetOutput(io.Discard)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if err := applyConfigFile(fs, example); err != nil {
		t.Errorf("%s: %v", example, err)
	}
	if f.nodeID == "node1" || f.raftAddr == "127.0.0.1:7421" {
		t.Errorf("%s does not set node-id and raft-addr (got %q, %q)", example, f.nodeID, f.raftAddr)
	}
}

// TestPackaging_RejectsUnknownFlag is the control of parseInvocation: a
// flag or subcommand the CLI lacks fails it.
func TestPackaging_RejectsUnknownFlag(t *testing.T) {
	for _, args := range [][]string{{"serve", "--data-directory", "/data"}, {"health", "--port", "7420"}, {"serve", "--tick", "often"}} {
		var f serveFlags
		fs := newServeFlagSet(&f)
		if args[0] == "health" {
			fs = newHealthFlagSet(&healthFlags{}, io.Discard)
		}
		fs.SetOutput(io.Discard)
		if err := fs.Parse(args[1:]); err == nil {
			t.Errorf("%q parsed", args)
		}
	}
	found := false
	for _, c := range commands() {
		found = found || c.name == "healthcheck"
	}
	if _, ok := lookupCommand("healthcheck"); ok || found {
		t.Error(`"healthcheck" is a command`)
	}
}

func TestHealth_ExitCodes(t *testing.T) {
	var ready atomic.Bool
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/healthz":
			_, _ = w.Write([]byte("ok\n"))
		case r.URL.Path == "/readyz" && ready.Load():
			_, _ = w.Write([]byte("ready\n"))
		case r.URL.Path == "/readyz":
			http.Error(w, "cannot commit", http.StatusServiceUnavailable)
		default:
			http.NotFound(w, r)
		}
	}))
	defer ts.Close()
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	for _, tc := range []struct {
		name      string
		args      []string
		ready     bool
		want      int
		wantInOut string
	}{
		{"live", []string{"--url", ts.URL}, false, exitOK, "ok"},
		{"not ready", []string{"--url", ts.URL, "--ready"}, false, exitRejected, "cannot commit"},
		{"ready", []string{"--url", ts.URL, "--ready"}, true, exitOK, "ready"},
		{"unreachable", []string{"--url", closed.URL}, false, exitUnreachable, "unreachable"},
		{"stray argument", []string{"--url", ts.URL, "extra"}, false, exitUsage, "usage"},
		{"bad timeout", []string{"--timeout", "0s"}, false, exitUsage, "usage"},
		{"unknown flag", []string{"--nope"}, false, exitUsage, "usage"},
		{"help", []string{"-h"}, false, exitOK, "usage"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ready.Store(tc.ready)
			var out, errOut bytes.Buffer
			if got := runHealthTo(tc.args, &out, &errOut); got != tc.want {
				t.Fatalf("health %q = %d, want %d; stderr %s", tc.args, got, tc.want, errOut.String())
			}
			if !strings.Contains(out.String()+errOut.String(), tc.wantInOut) {
				t.Errorf("health %q printed %q / %q, want %q", tc.args, out.String(), errOut.String(), tc.wantInOut)
			}
		})
	}
}

// TestPackaging_OperationsDocFlags: every serve, health, backup and
// restore command line in docs/operations.md names only flags that
// command has (values are not checked: the doc uses shell expansions).
func TestPackaging_OperationsDocFlags(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(b), "\\\n", " ")
	checked := 0
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		i := slices.Index(f, "termivar-coord")
		if i < 0 || i+1 >= len(f) || !slices.Contains([]string{"serve", "health", "backup", "restore"}, f[i+1]) {
			continue
		}
		p := parseInvocation(t, "docs/operations.md", []string{f[i+1]})
		for _, tok := range f[i+2:] {
			name, ok := strings.CutPrefix(tok, "--")
			if !ok {
				continue
			}
			name, _, _ = strings.Cut(name, "=")
			name = strings.TrimRight(name, "`")
			if p.fs.Lookup(name) == nil {
				t.Errorf("docs/operations.md: %s has no flag --%s (line %q)", f[i+1], name, strings.TrimSpace(line))
			}
		}
		checked++
	}
	if checked < 5 {
		t.Errorf("checked %d command lines in docs/operations.md, want at least 5", checked)
	}
}
