// Test of a mixed-version cluster at the node level (version.go). Goal:
// with one member on the previous release (EmulateVersion 1), the leader
// does not raise the cluster version and refuses the version-2 operation
// before it reaches the log; an entry of that operation that reaches the
// log anyway (proposed past the gate) is answered deterministically by the
// members that know it and stops the old member with an error naming the
// entry and saying to upgrade — it applies nothing of it — while the two
// others keep committing. Method: a 3-member static cluster (openCluster),
// raft.Apply on the leader to bypass the gate.
package node

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/raftfsm"
)

func TestNode_MixedVersionOldMemberStops(t *testing.T) {
	t.Parallel()
	var byURL sync.Map // API URL → *Node, for followers' registration
	nodes := openClusterWith(t, 3, func(i int, c *Config) {
		if i == 2 {
			c.EmulateVersion = 1
		}
		id, url, v := c.NodeID, c.APIURL, c.MaxVersion()
		c.RegisterSelf = func(ctx context.Context, leaderURL string, inc []byte) error {
			l, ok := byURL.Load(leaderURL)
			if !ok {
				return errors.New("leader not open yet")
			}
			return l.(*Node).AddVoter(ctx, id, "", url, inc, v)
		}
	})
	for _, n := range nodes {
		byURL.Store(n.cfg.APIURL, n)
	}
	var l *Node
	waitFor(t, "every member registered its version", func() bool {
		l = leaderOf(nodes)
		return l != nil && l.FSM().NodeVersion("n1") == raftfsm.SupportedVersion && l.FSM().NodeVersion("n2") == raftfsm.SupportedVersion && l.FSM().NodeVersion("n3") == 1
	})
	old := nodes[2]
	if l == old {
		// NB: the entry must come from a member that knows it.
		if _, err := old.TransferLeadership(context.Background(), "n1"); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "n1 leads", func() bool { l = leaderOf(nodes); return l == nodes[0] })
	}
	id := make([]byte, raftfsm.BackupIDBytes)
	if _, err := rand.Read(id); err != nil {
		t.Fatal(err)
	}
	cmd := &pb.Command{Op: &pb.Command_RecordBackup{RecordBackup: &pb.RecordBackup{BackupId: id, NodeId: "n1"}}}
	// The gate: refused before the log, typed.
	idx := l.FSM().AppliedIndex()
	r, err := l.Propose(context.Background(), cmd)
	if err != nil || !errors.Is(r.Err, raftfsm.ErrClusterVersion) || l.FSM().AppliedIndex() != idx {
		t.Fatalf("Propose(RecordBackup) at cluster version %d = %v, %v (index %d → %d); want cluster_version, nothing appended",
			l.ClusterVersion(), r.Err, err, idx, l.FSM().AppliedIndex())
	}
	if l.ClusterVersion() != 1 {
		t.Fatalf("cluster version %d with a member at 1", l.ClusterVersion())
	}
	// Past the gate (as a buggy or newer leader would): the old member
	// stops at the entry; the others answer it.
	waitFor(t, "the old member caught up", func() bool { return old.FSM().AppliedIndex() == l.FSM().AppliedIndex() })
	before, _ := old.FSM().ExportState()
	cmd.Version = raftfsm.CommandVersion
	data, err := raftfsm.MarshalEntry(cmd)
	if err != nil {
		t.Fatal(err)
	}
	f := l.raft.Apply(data, 5*time.Second)
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	if resp, _ := f.Response().(raftfsm.Response); !errors.Is(resp.Err, raftfsm.ErrClusterVersion) {
		t.Fatalf("the leader answered the entry with %v, want cluster_version", resp.Err)
	}
	select {
	case <-old.Failed():
	case <-time.After(15 * time.Second):
		t.Fatal("the old member did not stop")
	}
	want := fmt.Sprintf("log entry %d needs a newer binary", f.Index())
	if err := old.Err(); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "upgrade") || !strings.Contains(err.Error(), "record_backup") {
		t.Fatalf("old member's error = %v, want %q, the operation and to upgrade", err, want)
	}
	if after, _ := old.FSM().ExportState(); string(after) != string(before) {
		t.Error("the old member applied part of the entry")
	}
	// The two others keep committing.
	mustPropose(t, l, enqueue(raftfsm.SystemTenant, "after"))
	waitFor(t, "n2 applies the write", func() bool {
		tv, _ := nodes[1].FSM().Tenant(raftfsm.SystemTenant)
		_, ok, _ := tv.GetTask("after")
		return ok
	})
	t.Logf("old member stopped: %v", old.Err())
}

// TestNode_FreshNodeSchedulingDefaults: a fresh single node creates the
// system tenant at cluster version 1 without scheduling options and raises
// the cluster to this binary's version, whose raise brings the default
// scheduling options (DefaultServiceScheduling); reopened, it keeps them.
// A node emulating version 2 stays without them and refuses a scheduling
// operation before the log.
func TestNode_FreshNodeSchedulingDefaults(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	n := openNode(t, dir, nil)
	check := func(n *Node, what string) {
		t.Helper()
		tv, ok := n.FSM().Tenant(raftfsm.SystemTenant)
		if !ok || n.ClusterVersion() != raftfsm.SupportedVersion || tv.SchedulingOptions() != DefaultServiceScheduling() {
			t.Fatalf("%s: cluster version %d, system tenant options %+v; want %d and the defaults",
				what, n.ClusterVersion(), tv.SchedulingOptions(), raftfsm.SupportedVersion)
		}
	}
	check(n, "fresh node")
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	n = openNode(t, dir, nil)
	check(n, "reopened node")
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}

	old := openNode(t, t.TempDir(), func(c *Config) { c.EmulateVersion = 2 })
	defer old.Close()
	tv, _ := old.FSM().Tenant(raftfsm.SystemTenant)
	if old.ClusterVersion() != 2 || tv.SchedulingOptions() != (distributed.SchedulingOptions{}) {
		t.Fatalf("node at version 2: cluster version %d, options %+v", old.ClusterVersion(), tv.SchedulingOptions())
	}
	idx := old.FSM().AppliedIndex()
	cmd := &pb.Command{Tenant: raftfsm.SystemTenant, Op: &pb.Command_UpdateScan{UpdateScan: &pb.UpdateScan{ScanId: "s", Paused: proto.Bool(true)}}}
	if r, err := old.Propose(context.Background(), cmd); err != nil || !errors.Is(r.Err, raftfsm.ErrClusterVersion) || old.FSM().AppliedIndex() != idx {
		t.Fatalf("UpdateScan at cluster version 2 = %v, %v; want cluster_version before the log", r.Err, err)
	}
}
