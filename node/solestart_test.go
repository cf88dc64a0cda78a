// Test of the sole voter's start (solestart.go). Goal: a node that is the
// only voter leads as soon as raft runs, on a first start and on a
// restart, instead of after a heartbeat timeout. Method: a RaftTimeout of
// ten minutes, far beyond openNode's 20 s wait: Open returns (it waits for
// leadership, node.go waitReady) only if raft stood for election at once,
// and the restarted node holds the state it had.
package node

import (
	"bytes"
	"testing"
	"time"

	"github.com/termivar/distributed/raftfsm"
)

func TestNode_SoleVoterLeadsWithoutHeartbeatTimeout(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	slow := func(c *Config) { c.RaftTimeout = 10 * time.Minute }
	n := openNode(t, dir, slow)
	mustPropose(t, n, enqueue(raftfsm.SystemTenant, "a"))
	before, _ := n.FSM().ExportState()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	n2 := openNode(t, dir, slow)
	defer n2.Close()
	if !n2.IsLeader() {
		t.Fatal("the restarted sole voter does not lead")
	}
	after, _ := n2.FSM().ExportState()
	if !bytes.Equal(before, after) {
		t.Fatal("state differs after restart")
	}
}
