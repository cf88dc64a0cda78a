//go:build !invariants && !race

package sim

// coreAuditsCommands is false in release builds: the harness audits after
// every step itself.
const coreAuditsCommands = false
