// Tests of the client package against the in-memory clienttest server: the
// error type carries the core's kind through the wire (errors.Is against the
// core's sentinels), unreachable servers are told apart from rejections,
// retries back off, and EnqueueTargets is idempotent for derived IDs.
package client_test

import (
	"context"
	"errors"
	"net"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.uber.org/goleak"

	distributed "github.com/termivar/distributed"
	"github.com/termivar/distributed/client"
	"github.com/termivar/distributed/client/clienttest"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type testBundle struct {
	srv *clienttest.Server
	c   *client.Client
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	srv, err := clienttest.New(clienttest.Options{})
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

func TestNew_Validation(t *testing.T) {
	t.Parallel()
	if _, err := client.New(client.Config{ServerURL: "http://x:1"}); !errors.Is(err, client.ErrNoKey) {
		t.Errorf("New(no key) = %v, want ErrNoKey", err)
	}
	if _, err := client.New(client.Config{ServerURL: "ftp://x", Key: "k"}); err == nil {
		t.Error("New(ftp URL) = nil error, want one")
	}
}

func TestClient_ErrorCarriesCoreKind(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	_, err := b.c.GetTask(ctx, &pb.GetTaskRequest{TaskId: "nope"})
	if !errors.Is(err, distributed.ErrTaskNotFound) {
		t.Fatalf("GetTask(unknown) = %v, want ErrTaskNotFound", err)
	}
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Code != connect.CodeNotFound || ce.Kind != "task_not_found" || ce.Op != "Producer.GetTask" {
		t.Fatalf("GetTask(unknown) error = %#v", ce)
	}
	if client.IsUnreachable(err) {
		t.Error("a rejection is reported as unreachable")
	}
	if errors.Is(err, distributed.ErrWorkerNotFound) {
		t.Error("task_not_found matches ErrWorkerNotFound")
	}
}

func TestClient_UnreachableRetriesThenFails(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	c, err := client.New(client.Config{ServerURL: "http://" + addr, Key: "k", MaxAttempts: 3, MinBackoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	_, err = c.Status(context.Background(), &pb.StatusRequest{})
	if !client.IsUnreachable(err) {
		t.Fatalf("Status(closed port) = %v, want unreachable", err)
	}
	if d := time.Since(start); d < 10*time.Millisecond {
		t.Errorf("Status(closed port) took %v; retries did not back off", d)
	}
}

func TestClient_EnqueueTargetsIdempotent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	targets := []string{"a.example", "b.example", "c.example"}
	res, err := b.c.EnqueueTargets(ctx, client.EnqueueOptions{ScanID: "s1", BatchSize: 2}, slices.Values(targets))
	if err != nil || res.Enqueued != 3 || res.Existing != 0 {
		t.Fatalf("EnqueueTargets = %+v, %v; want 3 enqueued", res, err)
	}
	res, err = b.c.EnqueueTargets(ctx, client.EnqueueOptions{ScanID: "s1", KeepTaskIDs: true}, slices.Values(append(targets, "d.example")))
	if err != nil || res.Enqueued != 1 || res.Existing != 3 {
		t.Fatalf("EnqueueTargets(again + 1) = %+v, %v; want 1 enqueued, 3 existing", res, err)
	}
	if res.TaskIDs[0] != client.DeriveTaskID("s1", "a.example") {
		t.Errorf("TaskIDs[0] = %s, want the derived ID", res.TaskIDs[0])
	}
	// The same explicit ID with another target is an error.
	_, err = b.c.EnqueueTargets(ctx, client.EnqueueOptions{ScanID: "s1", TaskIDs: []string{res.TaskIDs[0]}}, slices.Values([]string{"z.example"}))
	if !errors.Is(err, client.ErrTargetMismatch) {
		t.Fatalf("EnqueueTargets(existing ID, other target) = %v, want ErrTargetMismatch", err)
	}
	var n int
	if err := b.c.EachTask(ctx, &pb.ListTasksRequest{ScanId: "s1", PageSize: 1}, func(*pb.TaskInfo) error { n++; return nil }); err != nil || n != 4 {
		t.Fatalf("EachTask = %d tasks, %v; want 4", n, err)
	}
}

func TestDeriveTaskID(t *testing.T) {
	t.Parallel()
	a, b := client.DeriveTaskID("s", "x"), client.DeriveTaskID("s", "x")
	if a != b || !distributed.ValidIdentifier(a) {
		t.Errorf("DeriveTaskID not stable or invalid: %q %q", a, b)
	}
	if client.DeriveTaskID("s", "x") == client.DeriveTaskID("s2", "x") || client.DeriveTaskID("s", "x") == client.DeriveTaskID("sx", "") {
		t.Error("DeriveTaskID collides across scans")
	}
}

func TestParsePhases(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want string
		ok   bool
	}{{"", "", true}, {"1,2", "1,2", true}, {" 3 , 4", "3,4", true}, {"1,x", "", false}, {"256", "", false}}
	for _, tt := range tests {
		got, err := client.ParsePhases(tt.in)
		if (err == nil) != tt.ok || client.FormatPhases(got) != tt.want {
			t.Errorf("ParsePhases(%q) = %v, %v; want %q ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestClient_ResultsInEnqueueOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	targets := []string{"z", "a", "m"}
	if _, err := b.c.EnqueueTargets(ctx, client.EnqueueOptions{ScanID: "s"}, slices.Values(targets)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.c.RegisterWorker(ctx, &pb.RegisterWorkerRequest{WorkerId: "w", Capacity: 4}); err != nil {
		t.Fatal(err)
	}
	resp, err := b.c.Acquire(ctx, &pb.AcquireRequest{WorkerId: "w", MaxTasks: 3, Start: true, LeaseTtlSecs: 30})
	if err != nil || len(resp.GetTasks()) != 3 {
		t.Fatalf("Acquire = %v, %v", resp, err)
	}
	for _, lt := range resp.GetTasks() {
		if _, err := b.c.Complete(ctx, &pb.CompleteRequest{LeaseToken: lt.GetLeaseToken(), Result: []byte("r-" + lt.GetTargetRef())}); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	if err := b.c.Results(ctx, "s", func(_ string, r []byte) error { got = append(got, string(r)); return nil }); err != nil {
		t.Fatal(err)
	}
	if want := []string{"r-z", "r-a", "r-m"}; len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("Results = %v, want %v", got, want)
	}
}
