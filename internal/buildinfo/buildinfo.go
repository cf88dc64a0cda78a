// Package buildinfo reads the binary's build information (module version,
// VCS revision, Go version) from runtime/debug.ReadBuildInfo, for
// `termivar-coord version`, the Status RPC and the metrics' build series.
package buildinfo

import (
	"cmp"
	"fmt"
	"runtime"
	"runtime/debug"

	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// Info is one binary's build.
type Info struct {
	ModuleVersion string // "(devel)" for a checkout build
	VCSRevision   string // "" when unknown (go test, go run of a file)
	VCSModified   bool
	VCSTime       string
	GoVersion     string
}

// Read returns this binary's build information; a binary built without it
// reports "unknown" as module version and the runtime's Go version.
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Info{ModuleVersion: "unknown", GoVersion: runtime.Version()}
	}
	return FromBuildInfo(bi)
}

// FromBuildInfo extracts the fields of Info from bi.
func FromBuildInfo(bi *debug.BuildInfo) Info {
	in := Info{ModuleVersion: cmp.Or(bi.Main.Version, "(devel)"), GoVersion: bi.GoVersion}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			in.VCSRevision = s.Value
		case "vcs.modified":
			in.VCSModified = s.Value == "true"
		case "vcs.time":
			in.VCSTime = s.Value
		}
	}
	return in
}

// String is the one line `termivar-coord version` prints.
func (in Info) String() string {
	rev := cmp.Or(in.VCSRevision, "unknown")
	if in.VCSModified {
		rev += "+dirty"
	}
	return fmt.Sprintf("termivar-coord %s (revision %s, %s)", in.ModuleVersion, rev, in.GoVersion)
}

// Proto returns in as the wire's BuildInfo.
func (in Info) Proto() *pb.BuildInfo {
	return &pb.BuildInfo{ModuleVersion: in.ModuleVersion, VcsRevision: in.VCSRevision, VcsModified: in.VCSModified,
		VcsTime: in.VCSTime, GoVersion: in.GoVersion}
}

// FromProto is the inverse of Proto (a nil message from an older node is
// the zero Info).
func FromProto(p *pb.BuildInfo) Info {
	return Info{ModuleVersion: p.GetModuleVersion(), VCSRevision: p.GetVcsRevision(), VCSModified: p.GetVcsModified(),
		VCSTime: p.GetVcsTime(), GoVersion: p.GetGoVersion()}
}
