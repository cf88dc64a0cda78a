package server

// Goal: Cluster.Backup streams a backup file whose state is the node's
// whole FSM state at the index in its header, only to a system-tenant
// admin key, and writes one audit line per call, accepted or refused.
// Method: a real node (harness_test.go), a tenant admin and a producer
// key refused, the admin key's stream decoded and compared with the
// FSM's ExportState at the same applied index.

import (
	"bytes"
	"context"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/gen/termivar/v1/termivarv1connect"
	"github.com/termivar/distributed/internal/backup"
)

func TestServer_Backup(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	b.createTenant(t, "acme", nil, nil)
	tenantAdmin := b.createKey(t, "acme", "admin")
	prod := b.createKey(t, "default", "producer")
	if _, err := b.clients(prod).producer.Enqueue(ctx, connect.NewRequest(&pb.EnqueueRequest{Tasks: []*pb.NewTask{{TaskId: "t1", ScanId: "s", TargetRef: "x"}}})); err != nil {
		t.Fatal(err)
	}
	read := func(key string) ([]byte, error) {
		cl := termivarv1connect.NewClusterClient(b.srv.Client(), b.srv.URL, connect.WithInterceptors(authInterceptor{key}))
		st, err := cl.Backup(ctx, connect.NewRequest(&pb.BackupRequest{}))
		if err != nil {
			return nil, err
		}
		defer st.Close()
		var out []byte
		for st.Receive() {
			out = append(out, st.Msg().GetData()...)
		}
		return out, st.Err()
	}
	for _, key := range []string{prod, tenantAdmin} {
		if got, err := read(key); connect.CodeOf(err) != connect.CodePermissionDenied || len(got) != 0 {
			t.Errorf("Backup with a non-system key = %d bytes, %v; want PermissionDenied and nothing", len(got), err)
		}
	}
	file, err := read(b.adminKey)
	if err != nil {
		t.Fatal(err)
	}
	h, state, err := backup.Decode(file)
	if err != nil {
		t.Fatal(err)
	}
	want, err := b.node.FSM().ExportState()
	if err != nil {
		t.Fatal(err)
	}
	if h.GetAppliedIndex() != b.node.FSM().AppliedIndex() || !bytes.Equal(state, want) {
		t.Errorf("backup at index %d (%d bytes); node at %d (%d bytes): want the same state", h.GetAppliedIndex(), len(state), b.node.FSM().AppliedIndex(), len(want))
	}
	if !bytes.Equal(h.GetEpochId(), b.node.FSM().Epoch()) || h.GetNodeId() != b.node.NodeID() {
		t.Errorf("header %v: want the node's epoch and ID", h)
	}
	if n := auditCounts(t, b.auditLog)["Cluster.Backup"]; n != 3 {
		t.Errorf("audit lines for Cluster.Backup = %d, want 3 (two refused, one accepted)", n)
	}
}
