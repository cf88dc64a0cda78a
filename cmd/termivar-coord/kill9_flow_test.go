// The flow-controlled enqueue under kill -9, part of TestServe_Kill9. Goal:
// `enqueue --file` of a scan far larger than its tenant's queue survives a
// kill -9 of the client and then of the node in the middle: the node's
// kill makes it report how much is stored and exit 3; after the restart
// the same command completes (exit 0) and every target is stored exactly
// once, under its derived ID, and worked to one result. Method: a tenant
// with a 64-task queue; the real binary's enqueue command against the real
// node while an in-process worker drains the queue; SIGKILL of the enqueue
// process once 1 000 of the 20 000 targets are admitted, the same command
// again, SIGKILL of the node once 3 000 are admitted; then the re-run, and
// the scan checked through ListTasks, ScanProgress and AggregateResults.
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/termivar/distributed/client"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

const (
	flowScan         = "flow"
	flowTargets      = 20000
	flowClientKillAt = 1000
	flowKillAt       = 3000
)

// flowEnqueueKill9 runs the scenario on the running node c and returns the
// node that runs at its end.
func flowEnqueueKill9(t *testing.T, bin, dir string, api, raftPort int, c *coord, adminKey string) *coord {
	t.Helper()
	prodKey, workKey := flowTenant(t, c.url, adminKey)
	targets := make([]string, flowTargets)
	for i := range targets {
		targets[i] = fmt.Sprintf("flow-%05d.example", i)
	}
	file := filepath.Join(t.TempDir(), "targets.txt")
	if err := os.WriteFile(file, []byte(strings.Join(targets, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	prod := flowClient(t, c.url, prodKey)
	stopWorker := flowWorker(t, c.url, workKey)
	defer stopWorker()

	admitted := func(n uint32) func() bool {
		return func() bool {
			p, err := prod.ScanProgress(context.Background(), &pb.ScanProgressRequest{ScanId: flowScan})
			return err == nil && p.GetTotal() >= n
		}
	}
	// The client dies first.
	first, firstExited, _ := startEnqueue(t, bin, c.url, prodKey, file)
	waitCond(t, "1 000 targets admitted", admitted(flowClientKillAt))
	if err := first.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := <-firstExited; err == nil {
		t.Fatal("the enqueue finished before its kill -9")
	}
	// The same command again; now the node dies under it.
	_, exited, errOut := startEnqueue(t, bin, c.url, prodKey, file)
	waitCond(t, "3 000 targets admitted", admitted(flowKillAt))
	c.kill9(t)
	err := <-exited
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitUnreachable || !strings.Contains(errOut.String(), " of 20000 targets are stored; run the same command again") {
		t.Fatalf("enqueue cut off by kill -9: %v, stderr %q; want exit 3 saying how many are stored", err, errOut.String())
	}

	c = startCoord(t, bin, dir, api, raftPort)
	rerun := exec.Command(bin, "enqueue", "--server", c.url, "--key", prodKey, "--scan", flowScan, "--batch", "256", "--quiet", "--file", file)
	got, err := rerun.CombinedOutput()
	if err != nil || !strings.Contains(string(got), "already present") {
		t.Fatalf("re-run: %v: %s", err, got)
	}
	var enqueued, present int
	if _, err := fmt.Sscanf(string(got), "enqueued %d tasks to scan flow (%d already present)", &enqueued, &present); err != nil || enqueued+present != flowTargets || present < flowKillAt {
		t.Fatalf("re-run said %q; want enqueued + already present = %d, at least %d present", got, flowTargets, flowKillAt)
	}
	prod = flowClient(t, c.url, prodKey)
	checkFlowScan(t, prod, targets)
	t.Logf("flow-controlled enqueue: killed after %s; the re-run enqueued %d, found %d", strings.TrimSpace(errOut.String()), enqueued, present)
	return c
}

// startEnqueue starts `enqueue --file` of the binary; the channel gets
// Wait's error, the buffer the command's stderr (read it after that).
func startEnqueue(t *testing.T, bin, url, key, file string) (*exec.Cmd, <-chan error, *bytes.Buffer) {
	t.Helper()
	// NB: --retry-for 1s: the run the node's kill cuts off gives up soon
	// instead of waiting out the restart (the re-run is what is tested).
	run := exec.Command(bin, "enqueue", "--server", url, "--key", key, "--scan", flowScan, "--batch", "256", "--quiet", "--retry-for", "1s", "--file", file)
	var errOut bytes.Buffer
	run.Stderr = &errOut
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- run.Wait() }()
	return run, exited, &errOut
}

// flowTenant creates tenant "flow" with a 64-task queue and returns a
// producer and a worker key of it.
func flowTenant(t *testing.T, url, adminKey string) (prodKey, workKey string) {
	t.Helper()
	admin := flowClient(t, url, adminKey)
	ctx := context.Background()
	_, err := admin.CreateTenant(ctx, &pb.CreateTenantRequest{Name: "flow",
		Limits: &pb.CoreLimits{MaxTaskRecords: 65536, MaxActiveTasks: 64, MaxQueuedTasks: 64, MaxTerminalTasks: 65536, MaxWorkers: 4,
			MaxRetries: 3, MaxLeaseTtlSecs: 3600, MaxTaskTtlSecs: 86400, HeartbeatTimeoutSecs: 3600},
		ResultLimits: &pb.ResultLimits{MaxResults: 65536, MaxResultBytes: 1024, MaxTotalBytes: 16 << 20, MaxAggregateItems: 1024, MaxAggregateBytes: 16 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct {
		role string
		dst  *string
	}{{"producer", &prodKey}, {"worker", &workKey}} {
		res, err := admin.CreateKey(ctx, &pb.CreateKeyRequest{Tenant: "flow", Role: r.role})
		if err != nil {
			t.Fatal(err)
		}
		*r.dst = res.GetKey()
	}
	return prodKey, workKey
}

func flowClient(t *testing.T, url, key string) *client.Client {
	t.Helper()
	c, err := client.New(client.Config{ServerURL: url, Key: key, MaxAttempts: 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// flowWorker completes the flow tenant's tasks with result "res-" + task
// ID until stopped; it keeps trying while the node is down.
func flowWorker(t *testing.T, url, key string) (stop func()) {
	t.Helper()
	w := flowClient(t, url, key)
	ctx, cancel := context.WithCancel(context.Background())
	if _, err := w.RegisterWorker(ctx, &pb.RegisterWorkerRequest{WorkerId: "fw", Capacity: 64}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			acq, err := w.Acquire(ctx, &pb.AcquireRequest{WorkerId: "fw", MaxTasks: 64, Start: true, LeaseTtlSecs: 5, WaitSecs: 1})
			if err != nil {
				_ = client.Sleep(ctx, 50*time.Millisecond)
				continue
			}
			req := &pb.CompleteManyRequest{}
			for _, tk := range acq.GetTasks() {
				req.Items = append(req.Items, &pb.CompleteRequest{LeaseToken: tk.GetLeaseToken(), Result: []byte("res-" + tk.GetTaskId())})
			}
			if len(req.Items) > 0 {
				_, _ = w.CompleteMany(ctx, req)
			}
		}
	}()
	return func() { cancel(); wg.Wait() }
}

// checkFlowScan waits until every task of the scan is completed, then
// checks that the scan holds exactly the targets, each once under its
// derived ID, with its declared total, and one result each.
func checkFlowScan(t *testing.T, prod *client.Client, targets []string) {
	t.Helper()
	ctx := context.Background()
	var p *pb.ScanProgressResponse
	waitWithin(t, "every flow task completed", 3*time.Minute, func() bool {
		var err error
		p, err = prod.ScanProgress(ctx, &pb.ScanProgressRequest{ScanId: flowScan})
		return err == nil && p.GetCompleted() == flowTargets
	})
	if p.GetTotal() != flowTargets || p.GetCompleted() != flowTargets || p.GetResults() != flowTargets || p.GetDeclaredTotal() != flowTargets {
		t.Fatalf("progress %v; want %d tasks, all completed with a result, declared %d", p, flowTargets, flowTargets)
	}
	stored := map[string]string{}
	err := prod.EachTask(ctx, &pb.ListTasksRequest{ScanId: flowScan}, func(ti *pb.TaskInfo) error {
		if _, dup := stored[ti.GetTaskId()]; dup {
			return fmt.Errorf("task %s listed twice", ti.GetTaskId())
		}
		stored[ti.GetTaskId()] = ti.GetTargetRef()
		return nil
	})
	if err != nil || len(stored) != flowTargets {
		t.Fatalf("ListTasks: %d tasks, %v", len(stored), err)
	}
	for _, tg := range targets {
		if stored[client.DeriveTaskID(flowScan, tg)] != tg {
			t.Fatalf("target %s is not stored under its derived ID", tg)
		}
	}
	seen := map[string]bool{}
	err = prod.Results(ctx, flowScan, func(id string, r []byte) error {
		if seen[id] || string(r) != "res-"+id {
			return fmt.Errorf("result of %s: repeated %v, %q", id, seen[id], r)
		}
		seen[id] = true
		return nil
	})
	if err != nil || len(seen) != flowTargets {
		t.Fatalf("results: %d, %v", len(seen), err)
	}
}
