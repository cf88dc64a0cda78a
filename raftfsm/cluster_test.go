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
