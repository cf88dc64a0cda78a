// Goal: DeleteScan, PurgeTasks and UpdateTenant over the wire (contract
// Part F, docs/adr/0002-purge.md): typed errors with their registry codes,
// refusals that change nothing, roles, audit, and a purged task's lease
// token refused as task_purged. Method: the real handlers over a node, as
// server_test.go.
package server

import (
	"testing"

	"connectrpc.com/connect"

	pb "github.com/termivar/distributed/gen/termivar/v1"
)

func TestServer_DeleteScanAndPurgeTasks(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	w := b.clients(b.createKey(t, "", "worker"))
	p := b.clients(b.createKey(t, "", "producer"))
	if _, err := w.worker.RegisterWorker(ctx, req(&pb.RegisterWorkerRequest{WorkerId: "w1", Capacity: 4})); err != nil {
		t.Fatal(err)
	}
	if _, err := p.producer.Enqueue(ctx, req(enqueueReq("scan1", "t1", "t2"))); err != nil {
		t.Fatal(err)
	}
	acq, err := w.worker.Acquire(ctx, req(&pb.AcquireRequest{WorkerId: "w1", MaxTasks: 1, Start: true}))
	if err != nil || len(acq.Msg.GetTasks()) != 1 {
		t.Fatalf("acquire = %v, %v", acq, err)
	}
	lt := acq.Msg.GetTasks()[0].GetLeaseToken()
	if _, err := w.worker.Complete(ctx, req(&pb.CompleteRequest{LeaseToken: lt, Result: []byte("r1")})); err != nil {
		t.Fatal(err)
	}

	refused := []struct {
		name string
		call func() error
		code connect.Code
		kind string
	}{
		{"delete scan with a queued task", func() error {
			_, err := p.producer.DeleteScan(ctx, req(&pb.DeleteScanRequest{ScanId: "scan1"}))
			return err
		}, connect.CodeFailedPrecondition, "invalid_transition"},
		{"delete unknown scan", func() error {
			_, err := p.producer.DeleteScan(ctx, req(&pb.DeleteScanRequest{ScanId: "nope"}))
			return err
		}, connect.CodeNotFound, "scan_not_found"},
		{"delete invalid scan ID", func() error {
			_, err := p.producer.DeleteScan(ctx, req(&pb.DeleteScanRequest{ScanId: "bad scan"}))
			return err
		}, connect.CodeInvalidArgument, "invalid_task"},
		{"purge a queued task", func() error {
			_, err := p.producer.PurgeTasks(ctx, req(&pb.PurgeTasksRequest{TaskIds: []string{"t1", "t2"}}))
			return err
		}, connect.CodeFailedPrecondition, "invalid_transition"},
		{"purge nothing", func() error {
			_, err := p.producer.PurgeTasks(ctx, req(&pb.PurgeTasksRequest{}))
			return err
		}, connect.CodeInvalidArgument, KindInvalidArgument},
		{"purge a repeated ID", func() error {
			_, err := p.producer.PurgeTasks(ctx, req(&pb.PurgeTasksRequest{TaskIds: []string{"t1", "t1"}}))
			return err
		}, connect.CodeInvalidArgument, "invalid_task"},
		{"purge by a worker key", func() error {
			_, err := w.producer.PurgeTasks(ctx, req(&pb.PurgeTasksRequest{TaskIds: []string{"t1"}}))
			return err
		}, connect.CodePermissionDenied, ""},
		{"update tenant by a producer key", func() error {
			_, err := p.admin.UpdateTenant(ctx, req(&pb.UpdateTenantRequest{ResultRetentionSecs: 60}))
			return err
		}, connect.CodePermissionDenied, ""},
	}
	for _, r := range refused {
		before := b.state(t)
		mustCode(t, r.call(), r.code, r.kind)
		b.assertUnchanged(t, before, r.name)
	}

	pr, err := p.producer.PurgeTasks(ctx, req(&pb.PurgeTasksRequest{TaskIds: []string{"t1"}}))
	if err != nil || pr.Msg.GetPurged() != 1 {
		t.Fatalf("purge t1 = %v, %v", pr, err)
	}
	_, err = w.worker.Complete(ctx, req(&pb.CompleteRequest{LeaseToken: lt, Result: []byte("r1")}))
	mustCode(t, err, connect.CodeNotFound, "task_purged")
	_, err = p.producer.GetTask(ctx, req(&pb.GetTaskRequest{TaskId: "t1"}))
	mustCode(t, err, connect.CodeNotFound, "task_not_found")

	ds, err := p.producer.DeleteScan(ctx, req(&pb.DeleteScanRequest{ScanId: "scan1", Force: true}))
	if err != nil || ds.Msg.GetPurged() != 1 || ds.Msg.GetCancelled() != 1 {
		t.Fatalf("delete --force = %v, %v", ds, err)
	}
	prog, err := p.producer.ScanProgress(ctx, req(&pb.ScanProgressRequest{ScanId: "scan1"}))
	if err == nil && prog.Msg.GetTotal() != 0 {
		t.Fatalf("progress after delete = %v", prog.Msg)
	}
	st, err := p.admin.Status(ctx, req(&pb.StatusRequest{}))
	if err != nil || st.Msg.GetTaskRecords() != 0 {
		t.Fatalf("status after delete = %v, %v", st, err)
	}
	counts := auditCounts(t, b.auditLog)
	if counts["Producer.DeleteScan"] != 4 || counts["Producer.PurgeTasks"] != 5 {
		t.Fatalf("audit lines %v", counts)
	}
}

func TestServer_TenantRetention(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	admin := b.clients(b.adminKey)
	if _, err := admin.admin.CreateTenant(ctx, req(&pb.CreateTenantRequest{Name: "ret", ResultRetentionSecs: 3600})); err != nil {
		t.Fatal(err)
	}
	tv, ok := b.node.Reads().Tenant("ret")
	if !ok || tv.ResultRetentionSecs() != 3600 {
		t.Fatalf("retention after create = %d", tv.ResultRetentionSecs())
	}
	if _, err := admin.admin.UpdateTenant(ctx, req(&pb.UpdateTenantRequest{Name: "ret", ResultRetentionSecs: 60})); err != nil {
		t.Fatal(err)
	}
	if tv.ResultRetentionSecs() != 60 {
		t.Fatalf("retention after update = %d", tv.ResultRetentionSecs())
	}
	before := b.state(t)
	_, err := admin.admin.UpdateTenant(ctx, req(&pb.UpdateTenantRequest{Name: "nope", ResultRetentionSecs: 60}))
	mustCode(t, err, connect.CodeNotFound, "unknown_tenant")
	_, err = admin.admin.UpdateTenant(ctx, req(&pb.UpdateTenantRequest{Name: "ret", ResultRetentionSecs: 1 << 40}))
	mustCode(t, err, connect.CodeInvalidArgument, "invalid_command")
	b.assertUnchanged(t, before, "refused UpdateTenant")
	// A tenant admin may update only its own tenant.
	other := b.clients(b.createKey(t, "ret", "admin"))
	_, err = other.admin.UpdateTenant(ctx, req(&pb.UpdateTenantRequest{Name: "default", ResultRetentionSecs: 5}))
	mustCode(t, err, connect.CodePermissionDenied, "")
	if _, err := other.admin.UpdateTenant(ctx, req(&pb.UpdateTenantRequest{ResultRetentionSecs: 0})); err != nil {
		t.Fatal(err)
	}
	if tv.ResultRetentionSecs() != 0 {
		t.Fatalf("retention after the tenant admin's update = %d", tv.ResultRetentionSecs())
	}
}
