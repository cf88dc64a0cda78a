package raftfsm

import (
	"bytes"
	"testing"

	pb "github.com/termivar/distributed/gen/termivar/v1"
)

func TestFSM_NodeInfo(t *testing.T) {
	t.Parallel()
	b := setup(t)
	set := func(id, u string) Response {
		return b.apply(&pb.Command{Op: &pb.Command_SetNodeInfo{SetNodeInfo: &pb.SetNodeInfo{NodeId: id, ApiUrl: u}}})
	}
	for _, bad := range []struct{ id, u string }{{"", "http://a:1"}, {"n1", "ftp://a:1"}, {"n1", "http://"}, {"n1", "not a url"}} {
		before, _ := b.f.ExportState()
		if r := set(bad.id, bad.u); r.Err == nil {
			t.Errorf("SetNodeInfo(%q, %q) = nil error", bad.id, bad.u)
		}
		after, _ := b.f.ExportState()
		if !bytes.Equal(before, after) {
			t.Errorf("rejected SetNodeInfo(%q, %q) changed the state", bad.id, bad.u)
		}
	}
	if r := set("n1", "http://127.0.0.1:7420"); r.Err != nil {
		t.Fatal(r.Err)
	}
	if r := set("n2", "https://b:7420"); r.Err != nil {
		t.Fatal(r.Err)
	}
	if u, ok := b.f.NodeAPIURL("n1"); !ok || u != "http://127.0.0.1:7420" {
		t.Fatalf("NodeAPIURL(n1) = %q, %v", u, ok)
	}
	st, _ := b.f.ExportState()
	g := New(Options{})
	if err := g.RestoreState(st); err != nil {
		t.Fatal(err)
	}
	if m := g.NodeAPIURLs(); len(m) != 2 || m["n2"] != "https://b:7420" {
		t.Fatalf("restored nodes = %v", m)
	}
	if r := set("n1", ""); r.Err != nil {
		t.Fatal(r.Err)
	}
	if _, ok := b.f.NodeAPIURL("n1"); ok {
		t.Fatal("n1 still registered after removal")
	}
}

// A node's data dir incarnation, once recorded, changes only through
// removal: a wiped member cannot re-register as itself, and the record
// survives snapshot → restore.
func TestFSM_NodeIncarnation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	set := func(id, u string, inc []byte) Response {
		return b.apply(&pb.Command{Op: &pb.Command_SetNodeInfo{SetNodeInfo: &pb.SetNodeInfo{NodeId: id, ApiUrl: u, Incarnation: inc}}})
	}
	incA, incB := bytes.Repeat([]byte{1}, 16), bytes.Repeat([]byte{2}, 16)
	if r := set("n1", "http://a:1", incA); r.Err != nil {
		t.Fatal(r.Err)
	}
	// An update without an incarnation keeps the recorded one.
	if r := set("n1", "http://a:2", nil); r.Err != nil {
		t.Fatal(r.Err)
	}
	if inc, ok := b.f.NodeIncarnation("n1"); !ok || !bytes.Equal(inc, incA) {
		t.Fatalf("NodeIncarnation = %x, %v, want %x", inc, ok, incA)
	}
	for _, bad := range [][]byte{incB, make([]byte, MaxIncarnationBytes+1)} {
		before, _ := b.f.ExportState()
		if r := set("n1", "http://a:2", bad); r.Err == nil {
			t.Errorf("SetNodeInfo with incarnation %x = nil error", bad)
		}
		if after, _ := b.f.ExportState(); !bytes.Equal(before, after) {
			t.Error("a rejected SetNodeInfo changed the state")
		}
	}
	st, _ := b.f.ExportState()
	g := New(Options{})
	if err := g.RestoreState(st); err != nil {
		t.Fatal(err)
	}
	if inc, _ := g.NodeIncarnation("n1"); !bytes.Equal(inc, incA) {
		t.Fatalf("restored incarnation = %x", inc)
	}
	// Removal forgets it; the node may then register a new data dir.
	if r := set("n1", "", nil); r.Err != nil {
		t.Fatal(r.Err)
	}
	if r := set("n1", "http://a:1", incB); r.Err != nil {
		t.Fatalf("re-registration after removal: %v", r.Err)
	}
}
