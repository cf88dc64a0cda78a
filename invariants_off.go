//go:build !invariants && !race

package distributed

// invariantsEnabled is off in release builds (see invariants_on.go).
const invariantsEnabled = false
