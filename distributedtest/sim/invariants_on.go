//go:build invariants || race

package sim

// coreAuditsCommands: in invariants and race builds the core audits its
// whole state after every accepted command (invariants_on.go in the root
// package), so the harness skips its own audit after those.
const coreAuditsCommands = true
