package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	distributed "github.com/termivar/distributed"
	"github.com/termivar/distributed/client"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/internal/wire"
	"github.com/termivar/distributed/node"
)

// fillScan enqueues n tasks of scan s (IDs s-00000…, enqueue order
// different from ID order) and completes each with result(i).
func fillScan(t *testing.T, c *client.Client, s string, n int, result func(i int) string) []string {
	t.Helper()
	ctx := context.Background()
	ids := make([]string, n)
	for i := range n {
		ids[i] = fmt.Sprintf("%s-%05d", s, (i*7919)%n) // a permutation: enqueue order ≠ ID order
	}
	for lo := 0; lo < n; lo += 1000 {
		req := &pb.EnqueueRequest{}
		for _, id := range ids[lo:min(lo+1000, n)] {
			req.Tasks = append(req.Tasks, &pb.NewTask{TaskId: id, ScanId: s, TargetRef: "t"})
		}
		if _, err := c.Enqueue(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	index := make(map[string]int, n)
	for i, id := range ids {
		index[id] = i
	}
	if _, err := c.RegisterWorker(ctx, &pb.RegisterWorkerRequest{WorkerId: "w-" + s, Capacity: 256}); err != nil {
		t.Fatal(err)
	}
	for done := 0; done < n; {
		acq, err := c.Acquire(ctx, &pb.AcquireRequest{WorkerId: "w-" + s, MaxTasks: 256, Start: true})
		if err != nil || len(acq.GetTasks()) == 0 {
			t.Fatalf("acquire after %d: %v, %v", done, acq, err)
		}
		cm := &pb.CompleteManyRequest{}
		for _, lt := range acq.GetTasks() {
			cm.Items = append(cm.Items, &pb.CompleteRequest{LeaseToken: lt.GetLeaseToken(), Result: []byte(result(index[lt.GetTaskId()]))})
		}
		res, err := c.CompleteMany(ctx, cm)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res.GetResults() {
			if r.GetError() != nil {
				t.Fatalf("complete: %v", r.GetError())
			}
		}
		done += len(acq.GetTasks())
	}
	return ids
}

// checkResultsJSON runs `results --scan s --json` and checks it prints
// every task's result once, in enqueue order.
func checkResultsJSON(t *testing.T, url, key, s string, ids []string, result func(i int) string) {
	t.Helper()
	code, out, errOut := runCLI(t, url, key, "results", "--scan", s, "--json")
	if code != exitOK {
		t.Fatalf("results --json: exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != len(ids) {
		t.Fatalf("results --json printed %d lines, want %d", len(lines), len(ids))
	}
	for i, l := range lines {
		var r resultJSON
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		if r.Index != i+1 || r.TaskID != ids[i] || r.Result != result(i) {
			t.Fatalf("line %d = %+v, want task %s result %q", i+1, r, ids[i], result(i))
		}
	}
}

// TestCLI_ResultsLargerThanOneAggregate: `results --json` streams a scan of
// 2500 tasks, more than MaxAggregateItems (1024, the default), whole, in
// enqueue order, exactly once; and in a tenant with a small
// MaxAggregateBytes (64 KiB) it streams a scan whose results total about
// 2.2 MiB, chunked by bytes as well as by items.
func TestCLI_ResultsLargerThanOneAggregate(t *testing.T) {
	t.Parallel()
	lim := distributed.DefaultLimits()
	lim.MaxActiveTasks, lim.MaxQueuedTasks = 4096, 4096
	lim.MaxTaskRecords, lim.MaxTerminalTasks = 8192, 8192
	rl := distributed.DefaultResultLimits()
	rl.MaxResults = 4096
	url, key := inProcessNode(t, node.Config{DefaultLimits: lim, DefaultResultLimits: rl})
	c, err := client.New(client.Config{ServerURL: url, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	small := func(i int) string { return fmt.Sprintf("r%d", i) }
	ids := fillScan(t, c, "big", 2500, small)
	checkResultsJSON(t, url, key, "big", ids, small)

	// A tenant whose aggregates are bounded by bytes long before items.
	ctx := context.Background()
	brl := rl
	brl.MaxAggregateBytes = 64 << 10
	if _, err := c.CreateTenant(ctx, &pb.CreateTenantRequest{Name: "bytes", Limits: wire.LimitsToProto(lim), ResultLimits: wire.ResultLimitsToProto(brl)}); err != nil {
		t.Fatal(err)
	}
	kr, err := c.CreateKey(ctx, &pb.CreateKeyRequest{Tenant: "bytes", Role: "admin"})
	if err != nil {
		t.Fatal(err)
	}
	cb, err := client.New(client.Config{ServerURL: url, Key: kr.GetKey()})
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close()
	mixed := func(i int) string {
		if i%10 == 0 {
			return strings.Repeat(string(rune('a'+i%26)), 8000) + fmt.Sprint(i)
		}
		return fmt.Sprint(i)
	}
	ids = fillScan(t, cb, "mixed", 2500, mixed)
	checkResultsJSON(t, url, kr.GetKey(), "mixed", ids, mixed)
}
