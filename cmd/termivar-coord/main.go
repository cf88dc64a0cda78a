// Command termivar-coord is the termivar coordinator: the node (serve), the
// worker agent (worker) and the producer and operator CLI.
package main

import (
	"fmt"
	"os"
)

// Exit codes (SPEC Part D).
const (
	exitOK          = 0
	exitUsage       = 1
	exitRejected    = 2
	exitUnreachable = 3
)

func main() {
	if code, ok := dispatchRegistered(os.Args[1:]); ok {
		os.Exit(code)
	}
	fmt.Fprintf(os.Stderr, "usage: termivar-coord [--server URL] [--key KEY] COMMAND [flags]\n\ncommands:\n%s", registeredUsage())
	os.Exit(exitUsage)
}
