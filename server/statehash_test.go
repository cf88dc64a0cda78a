// Test of Admin.Status's state hash. Goal: a system-tenant admin gets the
// SHA-256 of the node's FSM state at an applied index, equal to the FSM's
// own; a write moves both; the hash is only computed when asked for, and
// other keys are refused without it. Method: a real single node behind the
// test server.
package server

import (
	"bytes"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/termivar/distributed/gen/termivar/v1"
)

func TestServer_StatusStateHash(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	admin := b.clients(b.adminKey)
	st, err := admin.admin.Status(ctx, req(&pb.StatusRequest{}))
	if err != nil || st.Msg.GetStateHash() != nil || st.Msg.GetStateHashIndex() != 0 {
		t.Fatalf("Status without state_hash = %v, %v; want no hash", st, err)
	}
	first, err := admin.admin.Status(ctx, req(&pb.StatusRequest{StateHash: true}))
	if err != nil {
		t.Fatal(err)
	}
	own, err := b.node.FSM().StateHash()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first.Msg.GetStateHash(), own.Sum[:]) || first.Msg.GetStateHashIndex() != own.Index || own.Index == 0 {
		t.Fatalf("Status hash %x@%d, FSM %x@%d", first.Msg.GetStateHash(), first.Msg.GetStateHashIndex(), own.Sum, own.Index)
	}
	if _, err := admin.producer.Enqueue(ctx, req(enqueueReq("s", "t1"))); err != nil {
		t.Fatal(err)
	}
	after, err := admin.admin.Status(ctx, req(&pb.StatusRequest{StateHash: true}))
	if err != nil || bytes.Equal(after.Msg.GetStateHash(), first.Msg.GetStateHash()) || after.Msg.GetStateHashIndex() <= first.Msg.GetStateHashIndex() {
		t.Fatalf("after a write: %x@%d (%v), before %x@%d", after.Msg.GetStateHash(), after.Msg.GetStateHashIndex(), err, first.Msg.GetStateHash(), first.Msg.GetStateHashIndex())
	}
	for _, role := range []string{"producer", "worker"} {
		c := b.clients(b.createKey(t, "", role))
		_, err := c.admin.Status(ctx, req(&pb.StatusRequest{StateHash: true}))
		mustCode(t, err, connect.CodePermissionDenied, KindPermissionDenied)
	}
	b.createTenant(t, "acme", nil, nil)
	tenantAdmin := b.clients(b.createKey(t, "acme", "admin"))
	_, err = tenantAdmin.admin.Status(ctx, req(&pb.StatusRequest{StateHash: true}))
	mustCode(t, err, connect.CodePermissionDenied, KindPermissionDenied)
}
