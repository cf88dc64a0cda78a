// Tests of the client's scan reads against the in-memory clienttest server.
// Goal: Follow passes every result exactly once, in enqueue order while
// tasks complete out of order (or in completion order when asked), returns
// when the scan is terminal, resumes after any cursor it handed out, and
// stops on the callback's error; EachScan pages through every scan;
// EachResult carries the targets.
package client_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/termivar/distributed/client"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// startScan enqueues tasks t1…tn of scan and leases them all to one
// worker; it returns the lease tokens by task ID.
func startScan(t *testing.T, c *client.Client, scan string, n int) map[string][]byte {
	t.Helper()
	ctx := context.Background()
	req := &pb.EnqueueRequest{}
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("%s-t%d", scan, i)
		req.Tasks = append(req.Tasks, &pb.NewTask{TaskId: id, ScanId: scan, TargetRef: "host-" + id})
	}
	if _, err := c.Enqueue(ctx, req); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RegisterWorker(ctx, &pb.RegisterWorkerRequest{WorkerId: "w-" + scan, Capacity: uint32(n)}); err != nil {
		t.Fatal(err)
	}
	acq, err := c.Acquire(ctx, &pb.AcquireRequest{WorkerId: "w-" + scan, MaxTasks: uint32(n), Start: true, LeaseTtlSecs: 300})
	if err != nil || len(acq.GetTasks()) != n {
		t.Fatalf("acquire = %v, %v", acq, err)
	}
	out := map[string][]byte{}
	for _, lt := range acq.GetTasks() {
		out[lt.GetTaskId()] = lt.GetLeaseToken()
	}
	return out
}

func TestClient_Follow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	leases := startScan(t, b.c, "f", 5)
	type got struct {
		lines   []string
		cursors []string
		err     error
	}
	done := make(chan got, 1)
	go func() {
		var g got
		g.err = b.c.Follow(ctx, client.FollowOptions{ScanID: "f"}, func(r client.Result) error {
			g.lines = append(g.lines, r.TaskID+"="+string(r.Result)+"@"+r.TargetRef)
			g.cursors = append(g.cursors, r.Cursor)
			return nil
		})
		done <- g
	}()
	for _, i := range []int{3, 1, 5, 2, 4} {
		id := fmt.Sprintf("f-t%d", i)
		if _, err := b.c.Complete(ctx, &pb.CompleteRequest{LeaseToken: leases[id], Result: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	g := <-done
	if g.err != nil {
		t.Fatalf("Follow = %v", g.err)
	}
	want := "f-t1=1@host-f-t1,f-t2=2@host-f-t2,f-t3=3@host-f-t3,f-t4=4@host-f-t4,f-t5=5@host-f-t5"
	if s := strings.Join(g.lines, ","); s != want {
		t.Fatalf("Follow passed %s, want %s", s, want)
	}
	// Resume after each cursor: exactly the results after it.
	for i, cur := range g.cursors {
		var rest []string
		if err := b.c.Follow(ctx, client.FollowOptions{ScanID: "f", Cursor: cur}, func(r client.Result) error {
			rest = append(rest, r.TaskID+"="+string(r.Result)+"@"+r.TargetRef)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if s, w := strings.Join(rest, ","), strings.Join(g.lines[i+1:], ","); s != w {
			t.Fatalf("Follow after %s = %s, want %s", cur, s, w)
		}
	}
	var order []string
	if err := b.c.Follow(ctx, client.FollowOptions{ScanID: "f", CompletionOrder: true}, func(r client.Result) error {
		order = append(order, r.TaskID)
		return nil
	}); err != nil || strings.Join(order, ",") != "f-t3,f-t1,f-t5,f-t2,f-t4" {
		t.Fatalf("completion-order Follow = %v, %v", order, err)
	}
	// The callback's error ends Follow.
	stop := errors.New("stop")
	n := 0
	err := b.c.Follow(ctx, client.FollowOptions{ScanID: "f"}, func(client.Result) error { n++; return stop })
	if !errors.Is(err, stop) || n != 1 {
		t.Fatalf("Follow with a failing callback = %v after %d calls, want stop after 1", err, n)
	}
	var targets []string
	if err := b.c.EachResult(ctx, "f", func(r client.Result) error {
		targets = append(targets, r.TargetRef)
		return nil
	}); err != nil || len(targets) != 5 || targets[0] != "host-f-t1" {
		t.Fatalf("EachResult targets = %v, %v", targets, err)
	}
}

func TestClient_EachScan(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	for _, s := range []string{"c", "a", "b"} {
		if _, err := b.c.Enqueue(ctx, &pb.EnqueueRequest{Tasks: []*pb.NewTask{{TaskId: s + "1", ScanId: s, TargetRef: "x"}}}); err != nil {
			t.Fatal(err)
		}
	}
	var ids []string
	if err := b.c.EachScan(ctx, 1, func(s *pb.ScanInfo) error {
		ids = append(ids, s.GetScanId()+":"+s.GetState())
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(ids, ","); got != "a:running,b:running,c:running" {
		t.Fatalf("EachScan = %s", got)
	}
	_, err := b.c.FollowResults(ctx, &pb.FollowResultsRequest{ScanId: "missing"})
	if client.KindOf(err) != "scan_not_found" {
		t.Fatalf("FollowResults(missing) = %v (kind %q), want scan_not_found", err, client.KindOf(err))
	}
}
