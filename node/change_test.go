package node

import (
	"testing"
	"time"

	"github.com/termivar/distributed/raftfsm"
)

// TestNode_ChangeChan: the channel ChangeChan returns is open until a log
// entry is applied, closed after it (before Propose returns, since the
// proposer returns after the apply), and a new one is handed out then.
func TestNode_ChangeChan(t *testing.T) {
	t.Parallel()
	n := openNode(t, t.TempDir(), nil)
	defer n.Close()
	c := n.ChangeChan()
	select {
	case <-c:
		t.Fatal("ChangeChan is closed before any new entry")
	default:
	}
	mustPropose(t, n, enqueue(raftfsm.SystemTenant, "a"))
	select {
	case <-c:
	case <-time.After(10 * time.Second):
		t.Fatal("ChangeChan was not closed by an applied entry")
	}
	c2 := n.ChangeChan()
	if c2 == c {
		t.Fatal("ChangeChan returned the closed channel again")
	}
	mustPropose(t, n, enqueue(raftfsm.SystemTenant, "b"))
	select {
	case <-c2:
	case <-time.After(10 * time.Second):
		t.Fatal("the second ChangeChan was not closed by an applied entry")
	}
}
