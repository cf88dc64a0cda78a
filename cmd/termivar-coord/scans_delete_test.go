package main

// Goal: `scans delete` (plain `scans` lists: scans_test.go) and `tenants create/update --result-retention`
// against a real node (contract Part F, docs/adr/0002-purge.md): exit codes,
// messages and the stored state for each outcome; and a tenant whose record
// limit is small keeps running scans forever when it deletes them.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/termivar/distributed/client"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/node"
)

// runScan enqueues n targets as scan and completes all but leave of them.
func runScan(t *testing.T, c *client.Client, scan string, n, leave int) {
	t.Helper()
	ctx := context.Background()
	req := &pb.EnqueueRequest{}
	for i := range n {
		req.Tasks = append(req.Tasks, &pb.NewTask{TaskId: fmt.Sprintf("%s-%d", scan, i), ScanId: scan, TargetRef: "t"})
	}
	if _, err := c.Enqueue(ctx, req); err != nil {
		t.Fatalf("enqueue %s: %v", scan, err)
	}
	if n == leave {
		return
	}
	acq, err := c.Acquire(ctx, &pb.AcquireRequest{WorkerId: "w1", MaxTasks: uint32(n - leave), Start: true})
	if err != nil {
		t.Fatalf("acquire %s: %v", scan, err)
	}
	for _, a := range acq.GetTasks() {
		if _, err := c.Complete(ctx, &pb.CompleteRequest{LeaseToken: a.GetLeaseToken(), Result: []byte("r")}); err != nil {
			t.Fatalf("complete %s: %v", a.GetTaskId(), err)
		}
	}
}

func records(t *testing.T, c *client.Client) (tasks, results uint32) {
	t.Helper()
	s, err := c.Status(context.Background(), &pb.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return s.GetTaskRecords(), s.GetResults()
}

func TestCLI_ScansDelete(t *testing.T) {
	t.Parallel()
	url, key := inProcessNode(t, node.Config{})
	c, err := client.New(client.Config{ServerURL: url, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.RegisterWorker(context.Background(), &pb.RegisterWorkerRequest{WorkerId: "w1", Capacity: 8}); err != nil {
		t.Fatal(err)
	}
	runScan(t, c, "done", 3, 0)
	runScan(t, c, "busy", 3, 1)

	for _, tc := range []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"scans", "delete"}, exitUsage, "usage: termivar-coord scans delete SCAN"},
		{[]string{"scans", "delete", "bad scan"}, exitUsage, "scan ID is invalid"},
		{[]string{"scans", "frob"}, exitUsage, "unknown subcommand"},
		{[]string{"scans", "delete", "busy"}, exitRejected, "scan busy still has queued, leased or running tasks; wait for them, or delete with --force"},
		{[]string{"scans", "delete", "nope"}, exitRejected, "scan nope has no tasks"},
	} {
		code, out, errOut := runCLI(t, url, key, tc.args...)
		if code != tc.code || out != "" || !strings.Contains(errOut, tc.err) {
			t.Errorf("%v: exit %d, out %q, err %q; want exit %d and %q", tc.args, code, out, errOut, tc.code, tc.err)
		}
	}
	if tasks, results := records(t, c); tasks != 6 || results != 5 {
		t.Fatalf("refused deletes changed the state: %d tasks, %d results", tasks, results)
	}
	code, out, errOut := runCLI(t, url, key, "scans", "delete", "done")
	if code != exitOK || out != "deleted scan done: 3 tasks and their results\n" {
		t.Fatalf("delete done: exit %d, out %q, err %q", code, out, errOut)
	}
	code, out, _ = runCLI(t, url, key, "scans", "delete", "--json", "busy", "--force")
	var js struct {
		Purged, Cancelled uint32
	}
	if code != exitOK || json.Unmarshal([]byte(out), &js) != nil || js.Purged != 3 || js.Cancelled != 1 {
		t.Fatalf("delete --force --json: exit %d, out %q", code, out)
	}
	if tasks, results := records(t, c); tasks != 0 || results != 0 {
		t.Fatalf("after deleting both scans: %d tasks, %d results", tasks, results)
	}
	code, _, errOut = runCLI(t, url, key, "scans", "delete", "done")
	if code != exitRejected || !strings.Contains(errOut, "already deleted") {
		t.Fatalf("delete again: exit %d, err %q", code, errOut)
	}
}

// smallTenant creates tenant name (16 task records, 8 active, 8 queued)
// with the given --result-retention through `tenants create`, and returns
// a client with an admin key of it, whose worker w1 (capacity 8) is
// registered, and that key.
func smallTenant(t *testing.T, url, key, name, retention string) (*client.Client, string) {
	t.Helper()
	if code := runTenants([]string{"create", "--server", url, "--key", key, "--name", name, "--result-retention", retention,
		"--max-task-records", "16", "--max-terminal-tasks", "16", "--max-active-tasks", "8", "--max-queued-tasks", "8"}); code != exitOK {
		t.Fatalf("tenants create: exit %d", code)
	}
	admin, err := client.New(client.Config{ServerURL: url, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ctx := context.Background()
	kr, err := admin.CreateKey(ctx, &pb.CreateKeyRequest{Tenant: name, Role: "admin"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(client.Config{ServerURL: url, Key: kr.GetKey()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if _, err := c.RegisterWorker(ctx, &pb.RegisterWorkerRequest{WorkerId: "w1", Capacity: 8}); err != nil {
		t.Fatal(err)
	}
	return c, kr.GetKey()
}

// TestCLI_SmallTenantRunsForever: a tenant limited to 16 task records runs
// ten times that many tasks in scans of 8, deleting each scan when it is
// done; without the deletes it stops at its limit.
func TestCLI_SmallTenantRunsForever(t *testing.T) {
	t.Parallel()
	url, key := inProcessNode(t, node.Config{})
	c, tenantKey := smallTenant(t, url, key, "small", "7d")
	ctx := context.Background()
	for i := range 20 {
		scan := fmt.Sprintf("s%d", i)
		runScan(t, c, scan, 8, 0)
		if code, out, errOut := runCLI(t, url, tenantKey, "scans", "delete", scan); code != exitOK {
			t.Fatalf("scan %d: delete exit %d, out %q, err %q", i, code, out, errOut)
		}
	}
	if tasks, results := records(t, c); tasks != 0 || results != 0 {
		t.Fatalf("after 20 deleted scans: %d tasks, %d results", tasks, results)
	}
	runScan(t, c, "keep1", 8, 0)
	runScan(t, c, "keep2", 8, 0)
	_, err := c.Enqueue(ctx, &pb.EnqueueRequest{Tasks: []*pb.NewTask{{TaskId: "over", ScanId: "keep3", TargetRef: "t"}}})
	if err == nil {
		t.Fatal("a tenant at its record limit admitted another task")
	}
	// The retention given at creation is the tenant's, and update changes it.
	code, out, _ := runCLI(t, url, tenantKey, "status", "--json")
	var st struct {
		Retention uint64 `json:"result_retention_secs"`
	}
	if code != exitOK || json.Unmarshal([]byte(out), &st) != nil || st.Retention != 7*86400 {
		t.Fatalf("status --json: exit %d, out %q", code, out)
	}
	for _, bad := range []string{"-1h", "7x", "1.5s", "4000d"} {
		if code := runTenants([]string{"update", "--server", url, "--key", key, "--name", "small", "--result-retention", bad}); code != exitUsage {
			t.Errorf("--result-retention %s: exit %d, want %d", bad, code, exitUsage)
		}
	}
	if code := runTenants([]string{"update", "--server", url, "--key", key, "--name", "nope", "--result-retention", "1h"}); code != exitRejected {
		t.Errorf("update of an unknown tenant: exit %d, want %d", code, exitRejected)
	}
	if code := runTenants([]string{"update", "--server", url, "--key", key, "--name", "small", "--result-retention", "12h"}); code != exitOK {
		t.Fatalf("tenants update: exit %d", code)
	}
	if s, err := c.Status(ctx, &pb.StatusRequest{}); err != nil || s.GetResultRetentionSecs() != 12*3600 {
		t.Fatalf("retention after update = %v, %v", s.GetResultRetentionSecs(), err)
	}
}

// TestCLI_RetentionPurgesThroughTheTicker: with a one-second retention the
// leader's ticker (real clock, 50 ms cadence) purges finished tasks and
// their results on its own and the tenant stays inside a 16-record limit
// while 64 tasks run through it; tasks still running are kept.
func TestCLI_RetentionPurgesThroughTheTicker(t *testing.T) {
	t.Parallel()
	url, key := inProcessNode(t, node.Config{TickInterval: 50 * time.Millisecond})
	c, _ := smallTenant(t, url, key, "ret", "1s")
	for i := range 8 {
		// Each scan needs room: the ticker must have purged the last ones.
		waitCond(t, "room for 8 more tasks", func() bool { n, _ := records(t, c); return n <= 8 })
		runScan(t, c, fmt.Sprintf("s%d", i), 8, 0)
	}
	waitCond(t, "room for 2 more tasks", func() bool { n, _ := records(t, c); return n <= 8 })
	runScan(t, c, "live", 2, 2) // queued: never purged
	waitCond(t, "retention to purge every finished task", func() bool {
		n, res := records(t, c)
		return n == 2 && res == 0
	})
}
