// Command termivar-coord runs and drives the termivar coordinator node.
//
//	termivar-coord serve [flags]          run a node (defaults: ./termivar-data, 127.0.0.1:7420)
//	termivar-coord keys create --tenant T --role admin|producer|worker
//	termivar-coord keys list|revoke KEYID|rotate KEYID
//	termivar-coord tenants create --name N
//	termivar-coord bench [flags]          end-to-end load generator
//	termivar-coord version [--json]       build information of this binary
//	termivar-coord completion bash|zsh|fish
//	termivar-coord backup --out FILE      consistent, checksummed backup (admin key)
//	termivar-coord restore --from FILE --data-dir DIR   new one-node cluster from it
//	termivar-coord health [--url U] [--ready]  liveness/readiness probe (exit 0: 200)
//
// Global flags of client commands: --server URL (env TERMIVAR_SERVER,
// default http://127.0.0.1:7420) and --key KEY (env TERMIVAR_KEY, default
// the admin key file of ./termivar-data), and for TLS --ca-file,
// --cert-file, --key-file (env TERMIVAR_TLS_CA_FILE, TERMIVAR_TLS_CERT_FILE,
// TERMIVAR_TLS_KEY_FILE), and --retry-timeout D (env TERMIVAR_RETRY_TIMEOUT,
// default 10 s: how long a call is retried through a leader election or an
// unreachable node; 0: one try). Exit codes: 0 success, 1 usage
// error, 2 rejected request, 3 server unreachable.
package main

import (
	"fmt"
	"os"
)

// Exit codes (contract Part D).
const (
	exitOK          = 0
	exitUsage       = 1
	exitRejected    = 2
	exitUnreachable = 3
	// exitScanFailed: watch saw the scan end with failed or expired tasks.
	exitScanFailed = 4
	// exitInterrupted is the shell's code for SIGINT (128+2): a client
	// command stopped by SIGINT or SIGTERM while it waited.
	exitInterrupted = 130
)

type command struct {
	name string
	help string
	run  func(args []string) int
}

func commands() []command {
	return []command{
		{"serve", "run a coordinator node", runServe},
		{"keys", "manage API keys (create, list, revoke KEYID, rotate KEYID)", runKeys},
		{"tenants", "manage tenants (tenants create --name N)", runTenants},
		{"bench", "end-to-end load generator against an embedded or remote node", runBench},
		{"version", "print the module version, VCS revision and Go version of this binary", runVersion},
		{"completion", "print a shell completion script (completion bash|zsh|fish)", runCompletion},
		{"backup", "stream a consistent, checksummed backup of the cluster from the leader into a file (admin key)", runBackup},
		{"restore", "build a new single-node cluster's data dir from a backup file", runRestore},
		{"health", "probe a node's /healthz (or /readyz with --ready): exit 0 if it answers 200", runHealth},
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: termivar-coord <command> [flags]")
	for _, c := range commands() {
		fmt.Fprintf(os.Stderr, "  %-10s %s\n", c.name, c.help)
	}
	fmt.Fprint(os.Stderr, registeredUsage())
}

func main() {
	// Client commands (worker, enqueue, status, tasks, workers, cancel,
	// watch, results, demo, cluster) are the table in cli.go.
	if code, ok := dispatchRegistered(os.Args[1:]); ok {
		os.Exit(code)
	}
	if len(os.Args) < 2 {
		usage()
		os.Exit(exitUsage)
	}
	for _, c := range commands() {
		if c.name == os.Args[1] {
			os.Exit(c.run(os.Args[2:]))
		}
	}
	if os.Args[1] == "help" || os.Args[1] == "-h" || os.Args[1] == "--help" {
		usage()
		os.Exit(exitOK)
	}
	fmt.Fprintf(os.Stderr, "termivar-coord: unknown command %q\n", os.Args[1])
	usage()
	os.Exit(exitUsage)
}
