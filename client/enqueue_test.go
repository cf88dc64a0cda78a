// Goal: every outcome of EnqueueTargets is reported and nothing is dropped
// silently: duplicates stored once and counted, collisions (another scan,
// another target, earlier in the input) named per target, each limit named
// with its value and what was stored, invalid targets refused by position,
// a full queue waited on until workers free room, and an interrupted call
// repeated to completion without duplicates. Method: the clienttest server
// (the real API and FSM) with small limits; every outcome is checked
// against the tasks the server stores.
package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	distributed "github.com/termivar/distributed"
	"github.com/termivar/distributed/client"
	"github.com/termivar/distributed/client/clienttest"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// setupLimits is setup with the system tenant's limits set to lim.
func setupLimits(t *testing.T, lim distributed.Limits) *testBundle {
	t.Helper()
	srv, err := clienttest.New(clienttest.Options{Limits: lim})
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(client.Config{ServerURL: srv.URL, Key: srv.Key})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		srv.Close()
	})
	return &testBundle{srv: srv, c: c}
}

// smallLimits are the core defaults with the four task bounds replaced.
func smallLimits(records, active, queued, terminal int) distributed.Limits {
	l := distributed.DefaultLimits()
	l.MaxTaskRecords, l.MaxActiveTasks, l.MaxQueuedTasks, l.MaxTerminalTasks = records, active, queued, terminal
	return l
}

// stored returns the scan's stored tasks as task ID → target.
func stored(t *testing.T, c *client.Client, scan string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := c.EachTask(context.Background(), &pb.ListTasksRequest{ScanId: scan}, func(ti *pb.TaskInfo) error {
		if _, dup := m[ti.GetTaskId()]; dup {
			return fmt.Errorf("task %s listed twice", ti.GetTaskId())
		}
		m[ti.GetTaskId()] = ti.GetTargetRef()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// targetsOf returns n distinct targets.
func targetsOf(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d.example", prefix, i)
	}
	return out
}

// wantStored fails unless the scan stores exactly targets, each under its
// derived ID.
func wantStored(t *testing.T, c *client.Client, scan string, targets []string) {
	t.Helper()
	got := stored(t, c, scan)
	if len(got) != len(targets) {
		t.Fatalf("scan %s stores %d tasks, want %d", scan, len(got), len(targets))
	}
	for _, tg := range targets {
		if got[client.DeriveTaskID(scan, tg)] != tg {
			t.Fatalf("scan %s lacks target %q under its derived ID", scan, tg)
		}
	}
}

func TestClient_EnqueueTargetsDuplicates(t *testing.T) {
	t.Parallel()
	b := setup(t)
	in := []string{"a", "b", "a", "c", "a", "b"}
	res, err := b.c.EnqueueTargets(context.Background(), client.EnqueueOptions{ScanID: "s", BatchSize: 2}, slices.Values(in))
	if err != nil {
		t.Fatal(err)
	}
	if res.Read != 6 || res.Enqueued != 3 || res.Duplicates != 3 || !slices.Equal(res.DuplicatePositions, []int{3, 5, 6}) || res.Stored() != 3 {
		t.Fatalf("EnqueueTargets = %+v; want 6 read, 3 enqueued, duplicates at 3, 5, 6", res)
	}
	wantStored(t, b.c, "s", []string{"a", "b", "c"})
	// A single repeated line: stored once, not "0 tasks".
	res, err = b.c.EnqueueTargets(context.Background(), client.EnqueueOptions{ScanID: "one"}, slices.Values([]string{"x", "x"}))
	if err != nil || res.Enqueued != 1 || res.Duplicates != 1 {
		t.Fatalf("EnqueueTargets(x, x) = %+v, %v; want 1 enqueued, 1 duplicate", res, err)
	}
	wantStored(t, b.c, "one", []string{"x"})
}

func TestClient_EnqueueTargetsCollisions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if _, err := b.c.EnqueueTargets(ctx, client.EnqueueOptions{ScanID: "other", TaskIDs: []string{"x1"}}, slices.Values([]string{"p"})); err != nil {
		t.Fatal(err)
	}
	// x1 belongs to scan "other": the rest is stored, x1 is named.
	res, err := b.c.EnqueueTargets(ctx, client.EnqueueOptions{ScanID: "s", TaskIDs: []string{"y0", "x1", "y2"}}, slices.Values([]string{"q0", "q1", "q2"}))
	if !errors.Is(err, client.ErrTaskIDCollision) || errors.Is(err, client.ErrTargetMismatch) {
		t.Fatalf("EnqueueTargets(other scan's ID) = %v, want ErrTaskIDCollision only", err)
	}
	want := []client.Collision{{Position: 2, TaskID: "x1", ScanID: "other"}}
	if res.Enqueued != 2 || res.CollisionCount != 1 || !slices.Equal(res.Collisions, want) {
		t.Fatalf("result = %+v; want 2 enqueued, collision %+v", res, want)
	}
	if got := stored(t, b.c, "s"); len(got) != 2 || got["y0"] != "q0" || got["y2"] != "q2" {
		t.Fatalf("scan s stores %v", got)
	}
	if got := stored(t, b.c, "other"); len(got) != 1 || got["x1"] != "p" {
		t.Fatalf("scan other stores %v; x1 must keep its target", got)
	}
	// The same scan's ID with another target, and an ID repeated in the
	// input with another target.
	res, err = b.c.EnqueueTargets(ctx, client.EnqueueOptions{ScanID: "s", TaskIDs: []string{"y0", "z", "z"}}, slices.Values([]string{"other-q0", "r1", "r2"}))
	if !errors.Is(err, client.ErrTaskIDCollision) || !errors.Is(err, client.ErrTargetMismatch) {
		t.Fatalf("EnqueueTargets(own ID, other target) = %v, want ErrTaskIDCollision and ErrTargetMismatch", err)
	}
	want = []client.Collision{{Position: 3, TaskID: "z", ScanID: "s", InInput: true}, {Position: 1, TaskID: "y0", ScanID: "s"}}
	sort.Slice(res.Collisions, func(i, j int) bool { return res.Collisions[i].InInput })
	if res.Enqueued != 1 || res.CollisionCount != 2 || !slices.Equal(res.Collisions, want) {
		t.Fatalf("result = %+v; want 1 enqueued, collisions %+v", res, want)
	}
	if got := stored(t, b.c, "s"); len(got) != 3 || got["y0"] != "q0" || got["z"] != "r1" {
		t.Fatalf("scan s stores %v", got)
	}
}

func TestClient_EnqueueTargetsLimits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		lim   distributed.Limits
		done  int // tasks completed before the enqueue
		n     int
		limit string
		value uint64
		fit   int
	}{
		{"records", smallLimits(8, 8, 8, 8), 0, 10, "max_task_records", 8, 8},
		{"active", smallLimits(16, 4, 4, 16), 0, 6, "max_active_tasks", 4, 4},
		{"queued", smallLimits(16, 8, 3, 16), 0, 6, "max_queued_tasks", 3, 3},
		{"terminal", smallLimits(16, 4, 4, 8), 6, 6, "max_terminal_tasks", 8, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setupLimits(t, tt.lim)
			ctx := context.Background()
			if tt.done > 0 {
				if _, err := b.c.RegisterWorker(ctx, &pb.RegisterWorkerRequest{WorkerId: "wdone", Capacity: 64}); err != nil {
					t.Fatal(err)
				}
			}
			for i := 0; i < tt.done; i += 3 { // within the active limit
				pre := targetsOf(fmt.Sprint("pre", i), min(3, tt.done-i))
				if _, err := b.c.EnqueueTargets(ctx, client.EnqueueOptions{ScanID: "pre"}, slices.Values(pre)); err != nil {
					t.Fatal(err)
				}
				completeAll(t, b.c, len(pre))
			}
			in := targetsOf("t", tt.n)
			res, err := b.c.EnqueueTargets(ctx, client.EnqueueOptions{ScanID: "s", NoWait: true}, slices.Values(in))
			var le *client.LimitError
			if !errors.As(err, &le) || le.Name != tt.limit || le.Value != tt.value {
				t.Fatalf("EnqueueTargets = %v, want LimitError %s (%d)", err, tt.limit, tt.value)
			}
			if res.Stored() != tt.fit {
				t.Fatalf("Stored() = %d, want %d (the room)", res.Stored(), tt.fit)
			}
			wantStored(t, b.c, "s", in[:tt.fit])
		})
	}
}

// completeAll leases and completes n queued tasks with worker wdone.
func completeAll(t *testing.T, c *client.Client, n int) {
	t.Helper()
	ctx := context.Background()
	for done := 0; done < n; {
		resp, err := c.Acquire(ctx, &pb.AcquireRequest{WorkerId: "wdone", MaxTasks: 64, Start: true, LeaseTtlSecs: 30})
		if err != nil || len(resp.GetTasks()) == 0 {
			t.Fatalf("Acquire = %v, %v after %d of %d", resp, err, done, n)
		}
		for _, lt := range resp.GetTasks() {
			if _, err := c.Complete(ctx, &pb.CompleteRequest{LeaseToken: lt.GetLeaseToken(), Result: []byte("r")}); err != nil {
				t.Fatal(err)
			}
			done++
		}
	}
}

// drain runs a worker that completes tasks from when start is closed
// until ctx ends; it returns a channel closed when it stopped.
func drain(ctx context.Context, t *testing.T, c *client.Client, start <-chan struct{}) <-chan struct{} {
	t.Helper()
	if _, err := c.RegisterWorker(context.Background(), &pb.RegisterWorkerRequest{WorkerId: "wdrain", Capacity: 16}); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		select {
		case <-start:
		case <-ctx.Done():
		}
		for ctx.Err() == nil {
			resp, err := c.Acquire(ctx, &pb.AcquireRequest{WorkerId: "wdrain", MaxTasks: 16, Start: true, LeaseTtlSecs: 30, WaitSecs: 1})
			if err != nil {
				continue
			}
			for _, lt := range resp.GetTasks() {
				_, _ = c.Complete(ctx, &pb.CompleteRequest{LeaseToken: lt.GetLeaseToken()})
			}
		}
	}()
	return stopped
}

// NB: not parallel: its busy worker and producer would share the CPU
// with the failover tests' 50 ms attempt deadlines.
func TestClient_EnqueueTargetsWaitsForRoom(t *testing.T) {
	b := setupLimits(t, smallLimits(512, 8, 8, 512))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	// NB: the worker starts once the call waits, so that it must wait
	// (a worker that keeps up would leave it room every time).
	waiting := make(chan struct{})
	stopped := drain(ctx, t, b.c, waiting)
	defer func() { cancel(); <-stopped }()
	in := targetsOf("t", 300)
	var waited bool
	res, err := b.c.EnqueueTargets(ctx, client.EnqueueOptions{ScanID: "s", BatchSize: 64, DeclaredTotal: 300,
		ProgressFunc: func(p client.EnqueueProgress) {
			if p.Waiting && !waited {
				waited = true
				close(waiting)
			}
		}}, slices.Values(in))
	if err != nil || res.Enqueued != 300 || res.Waits == 0 || !waited {
		t.Fatalf("EnqueueTargets = %+v, %v; want 300 enqueued after waiting", res, err)
	}
	wantStored(t, b.c, "s", in)
	p, err := b.c.ScanProgress(ctx, &pb.ScanProgressRequest{ScanId: "s"})
	if err != nil || p.GetDeclaredTotal() != 300 {
		t.Fatalf("ScanProgress = %v, %v; want declared total 300", p, err)
	}
}

// NB: not parallel: its busy worker and producer would share the CPU
// with the failover tests' 50 ms attempt deadlines.
func TestClient_EnqueueTargetsInterruptedThenResumed(t *testing.T) {
	b := setupLimits(t, smallLimits(512, 8, 8, 512))
	in := targetsOf("t", 100)
	// No worker: the queue fills at 8 and the call waits until cancelled.
	ctx, cancel := context.WithCancel(context.Background())
	res, err := b.c.EnqueueTargets(ctx, client.EnqueueOptions{ScanID: "s", BatchSize: 16,
		ProgressFunc: func(p client.EnqueueProgress) {
			if p.Waiting {
				cancel()
			}
		}}, slices.Values(in))
	if !errors.Is(err, context.Canceled) || res.Stored() != 8 {
		t.Fatalf("EnqueueTargets(cancelled) = %+v, %v; want 8 stored, context.Canceled", res, err)
	}
	wantStored(t, b.c, "s", in[:8])
	// The same call again, with a worker: the 8 count as existing.
	wctx, wcancel := context.WithTimeout(context.Background(), time.Minute)
	started := make(chan struct{})
	close(started)
	stopped := drain(wctx, t, b.c, started)
	defer func() { wcancel(); <-stopped }()
	res, err = b.c.EnqueueTargets(wctx, client.EnqueueOptions{ScanID: "s", BatchSize: 16}, slices.Values(in))
	if err != nil || res.Existing != 8 || res.Enqueued != 92 {
		t.Fatalf("EnqueueTargets(re-run) = %+v, %v; want 8 existing, 92 enqueued", res, err)
	}
	wantStored(t, b.c, "s", in)
}

func TestClient_EnqueueTargetsInvalidTarget(t *testing.T) {
	t.Parallel()
	b := setup(t)
	long := string(make([]byte, distributed.MaxTargetRefBytes+1))
	for _, tt := range []struct{ scan, bad string }{{"empty", ""}, {"too-long", long}, {"nul", "a\x00b"}} {
		t.Run(tt.scan, func(t *testing.T) {
			scan, bad := tt.scan, tt.bad
			in := []string{"a", "b", "c", bad, "d"}
			res, err := b.c.EnqueueTargets(context.Background(), client.EnqueueOptions{ScanID: scan, BatchSize: 2}, slices.Values(in))
			if !errors.Is(err, client.ErrInvalidTarget) || res.Read != 4 || res.Stored() != 3 {
				t.Fatalf("EnqueueTargets = %+v, %v; want ErrInvalidTarget at 4 with the 3 before it stored", res, err)
			}
			wantStored(t, b.c, scan, in[:3])
		})
	}
}

// TestClient_EnqueueTargetsRidesThroughUnreachable: a node that answers
// Unavailable to its first requests (a restart) stops an enqueue once the
// client's own retries are spent, unless RetryUnreachableFor keeps it
// going; then every target is stored once.
func TestClient_EnqueueTargetsRidesThroughUnreachable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	target, err := url.Parse(b.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	var down atomic.Int64
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Add(-1) >= 0 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"code":"unavailable","message":"restarting"}`))
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	defer front.Close()
	c, err := client.New(client.Config{ServerURL: front.URL, Key: b.srv.Key, MaxAttempts: 2, MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	in := targetsOf("t", 40)
	down.Store(5)
	res, err := c.EnqueueTargets(context.Background(), client.EnqueueOptions{ScanID: "gave-up", BatchSize: 10}, slices.Values(in))
	if !client.IsUnreachable(err) || res.Stored() != 0 {
		t.Fatalf("EnqueueTargets without RetryUnreachableFor = %+v, %v; want unreachable, nothing stored", res, err)
	}
	down.Store(5)
	res, err = c.EnqueueTargets(context.Background(), client.EnqueueOptions{ScanID: "rode", BatchSize: 10, RetryUnreachableFor: time.Minute}, slices.Values(in))
	if err != nil || res.Enqueued != 40 || res.Waits == 0 {
		t.Fatalf("EnqueueTargets with RetryUnreachableFor = %+v, %v; want 40 enqueued after waits", res, err)
	}
	wantStored(t, b.c, "rode", in)
}
