//go:build termivar_prev

package raftfsm

// SupportedVersion of the "previous release": `go build -tags
// termivar_prev` builds a binary that supports cluster version 2 only, so
// it proposes no version-3 operation (scheduling) and stops, naming the
// entry, instead of applying one (OpVersion, unsupported). The rolling
// upgrade test (cmd/termivar-coord/upgrade_proc_test.go) runs a cluster
// of such binaries and upgrades it, member by member, to a normal build.
// NB: a real previous release would not know the version-3 fields of the
// protocol at all; this one knows them and refuses them, which is what a
// member on it does with them (docs/node.md, "Versions and rolling
// upgrades").
const SupportedVersion = 2
