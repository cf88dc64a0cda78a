// Goal: the VCS settings Go embeds become Info's fields and its one line,
// and survive the wire. Method: a synthetic debug.BuildInfo.
package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef"}, {Key: "vcs.modified", Value: "true"},
		{Key: "vcs.time", Value: "2026-12-01T10:00:00Z"}, {Key: "-trimpath", Value: "true"}}}
	got := FromBuildInfo(bi)
	want := Info{ModuleVersion: "v1.2.3", VCSRevision: "0123456789abcdef", VCSModified: true, VCSTime: "2026-12-01T10:00:00Z", GoVersion: "go1.26.8"}
	if got != want {
		t.Fatalf("FromBuildInfo = %+v, want %+v", got, want)
	}
	if s := got.String(); s != "termivar-coord v1.2.3 (revision 0123456789abcdef+dirty, go1.26.8)" {
		t.Errorf("String = %q", s)
	}
	if back := FromProto(got.Proto()); back != got {
		t.Errorf("FromProto(Proto) = %+v, want %+v", back, got)
	}
	if s := FromBuildInfo(&debug.BuildInfo{GoVersion: "go1.26.8"}).String(); s != "termivar-coord (devel) (revision unknown, go1.26.8)" {
		t.Errorf("no VCS: String = %q", s)
	}
	if FromProto(nil) != (Info{}) {
		t.Error("FromProto(nil) is not the zero Info")
	}
}
