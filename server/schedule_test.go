package server

// Goal: the scheduling API of contract Part F end to end through the real
// handlers and a real node: enqueue with a delay and required tags,
// what GetTask, ListTasks(status=scheduled) and ScanProgress report, the
// leader's tick waking a due task (no client call), UpdateScan pause and
// max_in_flight (producer only), SetSchedulingOptions (admin only), the
// node's default options for tenants, and bad input refused unchanged.
// Method: a node with a controlled clock and no background ticker; Tick is
// called by the test.

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/node"
	"github.com/termivar/distributed/raftfsm"
	"google.golang.org/protobuf/proto"
)

func TestServer_Scheduling(t *testing.T) {
	t.Parallel()
	var offset atomic.Int64
	base := time.Now()
	b := setup(t, func(c *node.Config) {
		c.NowFunc = func() time.Time { return base.Add(time.Duration(offset.Load()) * time.Second) }
		c.DefaultScheduling = nil // the node's default (node.DefaultServiceScheduling)
	})
	tv, _ := b.node.Reads().Tenant(raftfsm.SystemTenant)
	if got := tv.SchedulingOptions(); got != node.DefaultServiceScheduling() {
		t.Fatalf("system tenant options %+v, want the node default", got)
	}
	w := b.clients(b.createKey(t, "", "worker"))
	p := b.clients(b.createKey(t, "", "producer"))
	admin := b.clients(b.adminKey)
	if _, err := w.worker.RegisterWorker(ctx, req(&pb.RegisterWorkerRequest{WorkerId: "w1", Capacity: 4, Tags: []string{"linux"}})); err != nil {
		t.Fatal(err)
	}
	er := enqueueReq("s1", "gpu1", "later", "now1", "now2")
	er.Tasks[0].RequiredTags = []string{"gpu"}
	er.Tasks[1].DelaySecs = 30
	if _, err := p.producer.Enqueue(ctx, req(er)); err != nil {
		t.Fatal(err)
	}
	got, err := p.producer.GetTask(ctx, req(&pb.GetTaskRequest{TaskId: "later"}))
	if err != nil || !got.Msg.GetTask().GetScheduled() || got.Msg.GetTask().GetNotBefore() == 0 {
		t.Fatalf("GetTask(later) = %v, %v; want scheduled with not_before", got, err)
	}
	list, err := p.producer.ListTasks(ctx, req(&pb.ListTasksRequest{Status: "scheduled"}))
	if err != nil || len(list.Msg.GetTasks()) != 1 || list.Msg.GetTasks()[0].GetTaskId() != "later" {
		t.Fatalf("ListTasks(scheduled) = %v, %v", list, err)
	}
	prog, err := p.producer.ScanProgress(ctx, req(&pb.ScanProgressRequest{ScanId: "s1"}))
	if err != nil || prog.Msg.GetScheduled() != 1 || prog.Msg.GetUnroutable() != 1 || prog.Msg.GetLiveWorkers() != 1 {
		t.Fatalf("ScanProgress = %v, %v; want 1 scheduled, 1 unroutable, 1 live worker", prog, err)
	}

	// max_in_flight 1: the linux worker gets one untagged task only.
	if _, err := w.producer.UpdateScan(ctx, req(&pb.UpdateScanRequest{ScanId: "s1", Paused: proto.Bool(true)})); err == nil {
		t.Fatal("a worker key paused a scan")
	}
	up, err := p.producer.UpdateScan(ctx, req(&pb.UpdateScanRequest{ScanId: "s1", MaxInFlight: proto.Uint32(1)}))
	if err != nil || up.Msg.GetMaxInFlight() != 1 || up.Msg.GetActive() != 4 {
		t.Fatalf("UpdateScan = %v, %v", up, err)
	}
	acq, err := w.worker.Acquire(ctx, req(&pb.AcquireRequest{WorkerId: "w1", MaxTasks: 4, Start: true}))
	if err != nil || len(acq.Msg.GetTasks()) != 1 || acq.Msg.GetTasks()[0].GetTaskId() != "now1" {
		t.Fatalf("Acquire = %v, %v; want now1 only", acq, err)
	}
	if _, err := p.producer.UpdateScan(ctx, req(&pb.UpdateScanRequest{ScanId: "s1", MaxInFlight: proto.Uint32(0), Paused: proto.Bool(true)})); err != nil {
		t.Fatal(err)
	}
	acq, err = w.worker.Acquire(ctx, req(&pb.AcquireRequest{WorkerId: "w1", MaxTasks: 4}))
	if err != nil || len(acq.Msg.GetTasks()) != 0 {
		t.Fatalf("Acquire on a paused scan = %v, %v", acq, err)
	}
	// ListScans shows the pause and the scheduled task; a paused scan with
	// a scheduled task is running, not finished.
	scans, err := p.producer.ListScans(ctx, req(&pb.ListScansRequest{}))
	if err != nil || len(scans.Msg.GetScans()) != 1 {
		t.Fatalf("ListScans = %v, %v", scans, err)
	}
	if si := scans.Msg.GetScans()[0]; !si.GetPaused() || si.GetScheduled() != 1 || si.GetState() != ScanRunning || si.GetFinishedAt() != 0 {
		t.Fatalf("ScanInfo of a paused scan with a scheduled task = %v", si)
	}
	if _, err := p.producer.UpdateScan(ctx, req(&pb.UpdateScanRequest{ScanId: "s1", Paused: proto.Bool(false)})); err != nil {
		t.Fatal(err)
	}
	// The delayed task wakes by the leader's tick alone.
	offset.Store(31)
	b.node.Tick(ctx)
	acq, err = w.worker.Acquire(ctx, req(&pb.AcquireRequest{WorkerId: "w1", MaxTasks: 4}))
	if err != nil || len(acq.Msg.GetTasks()) != 2 {
		t.Fatalf("Acquire after the tick = %v, %v; want later and now2", acq, err)
	}

	if _, err := p.admin.SetSchedulingOptions(ctx, req(&pb.SetSchedulingOptionsRequest{Options: &pb.SchedulingOptions{FairScans: true}})); err == nil {
		t.Fatal("a producer key set scheduling options")
	}
	if _, err := admin.admin.SetSchedulingOptions(ctx, req(&pb.SetSchedulingOptionsRequest{Options: &pb.SchedulingOptions{BackoffBaseSecs: 1}})); err != nil {
		t.Fatal(err)
	}
	if got := tv.SchedulingOptions(); got != (distributed.SchedulingOptions{BackoffBaseSecs: 1}) {
		t.Fatalf("options after SetSchedulingOptions = %+v", got)
	}

	before := b.state(t)
	bad := enqueueReq("s1", "x1")
	bad.Tasks[0].RequiredTags = []string{"quantum"}
	_, err = p.producer.Enqueue(ctx, req(bad))
	mustCode(t, err, connect.CodeInvalidArgument, "")
	_, err = admin.admin.SetSchedulingOptions(ctx, req(&pb.SetSchedulingOptionsRequest{Options: &pb.SchedulingOptions{BackoffBaseSecs: 10, BackoffCapSecs: 5}}))
	mustCode(t, err, connect.CodeInvalidArgument, "invalid_limit_relationship")
	_, err = p.producer.UpdateScan(ctx, req(&pb.UpdateScanRequest{ScanId: "s1"}))
	mustCode(t, err, connect.CodeInvalidArgument, "invalid_task")
	b.assertUnchanged(t, before, "refused scheduling requests")
}

// TestServer_SchedulingWithSkipExisting: scheduling fields and honest
// enqueue together. A skip_existing batch with a declared total stores
// the new task with its delay, reports the stored one as existing and
// records the total; a bad tag is refused by its request position even
// when the tasks before it are skipped, and changes nothing.
func TestServer_SchedulingWithSkipExisting(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	p := b.clients(b.createKey(t, "", "producer"))
	if _, err := p.producer.Enqueue(ctx, req(enqueueReq("s1", "a"))); err != nil {
		t.Fatal(err)
	}
	er := enqueueReq("s1", "a", "b")
	er.SkipExisting, er.DeclaredTotal = true, 3
	er.Tasks[1].DelaySecs = 60
	out, err := p.producer.Enqueue(ctx, req(er))
	if err != nil || len(out.Msg.GetTasks()) != 1 || len(out.Msg.GetExisting()) != 1 || out.Msg.GetExisting()[0] != 0 {
		t.Fatalf("Enqueue(skip_existing, delay) = %v, %v; want b enqueued, a existing", out, err)
	}
	got, err := p.producer.GetTask(ctx, req(&pb.GetTaskRequest{TaskId: "b"}))
	if err != nil || !got.Msg.GetTask().GetScheduled() {
		t.Fatalf("GetTask(b) = %v, %v; want scheduled", got, err)
	}
	prog, err := p.producer.ScanProgress(ctx, req(&pb.ScanProgressRequest{ScanId: "s1"}))
	if err != nil || prog.Msg.GetDeclaredTotal() != 3 || prog.Msg.GetPending() != 1 || prog.Msg.GetScheduled() != 1 {
		t.Fatalf("ScanProgress = %v, %v; want declared 3, pending 1, scheduled 1", prog, err)
	}

	before := b.state(t)
	bad := enqueueReq("s1", "a", "c")
	bad.SkipExisting = true
	bad.Tasks[1].RequiredTags = []string{"quantum"}
	_, err = p.producer.Enqueue(ctx, req(bad))
	mustCode(t, err, connect.CodeInvalidArgument, "")
	if !strings.Contains(err.Error(), "tasks[1]") {
		t.Fatalf("bad tag error %q does not name tasks[1]", err)
	}
	b.assertUnchanged(t, before, "a skip_existing batch with a bad tag")
}

// TestServer_CreateTenantSchedulingFollowsClusterVersion: a tenant created
// without scheduling options gets the node's defaults only once the
// cluster runs the version a CreateTenant with scheduling needs; below it
// (a rolling upgrade) it gets none and the creation still succeeds.
func TestServer_CreateTenantSchedulingFollowsClusterVersion(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		emulate uint32
		want    distributed.SchedulingOptions
	}{{2, distributed.SchedulingOptions{}}, {0, node.DefaultServiceScheduling()}} {
		b := setup(t, func(cfg *node.Config) {
			cfg.DefaultScheduling = nil // the node's default (node.DefaultServiceScheduling)
			cfg.EmulateVersion = c.emulate
		})
		b.createTenant(t, "acme", nil, nil)
		tv, ok := b.node.Reads().Tenant("acme")
		if !ok {
			t.Fatalf("emulated version %d: tenant acme not created", c.emulate)
		}
		if got := tv.SchedulingOptions(); got != c.want {
			t.Errorf("emulated version %d (cluster at %d): acme's options %+v, want %+v", c.emulate, b.node.Reads().ClusterVersion(), got, c.want)
		}
	}
}
