//go:build invariants || race

package distributed

// invariantsEnabled: in race builds and with -tags invariants (as in
// cockroachdb/pebble's internal/invariants) every successful command runs
// the full audit before it returns, and a broken invariant panics naming
// it. Release builds leave it off; commands never audit there.
const invariantsEnabled = true
