//go:build !termivar_prev

package raftfsm

// SupportedVersion is the highest cluster version this binary understands.
// A build with the tag termivar_prev is the "previous release"
// (version_prev.go).
const SupportedVersion = 3
