package clienttest_test

// Goal: clienttest is the production API over an in-memory backend, not a
// look-alike: keys are checked, tokens are sealed, proposals go through the
// FSM, the clock and background recovery move leases, renewals are
// counted. Method: drive it through the real client and check each
// behaviour a hand-written fake would have to copy.

import (
	"bytes"
	"context"
	"errors"
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

func setup(t *testing.T) (*clienttest.Server, *client.Client) {
	t.Helper()
	srv, err := clienttest.New(clienttest.Options{TickInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	c, err := client.New(client.Config{ServerURL: srv.URL, Key: srv.Key})
	if err != nil {
		t.Fatal(err)
	}
	return srv, c
}

func TestServer_RefusesUnknownKey(t *testing.T) {
	t.Parallel()
	srv, _ := setup(t)
	bad, err := client.New(client.Config{ServerURL: srv.URL, Key: "tvk_0000000000000000_x", MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	_, err = bad.Status(t.Context(), &pb.StatusRequest{})
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Code != connect.CodeUnauthenticated {
		t.Fatalf("Status(unknown key) = %v, want an unauthenticated error", err)
	}
}

func TestServer_LeaseLifecycle(t *testing.T) {
	t.Parallel()
	srv, c := setup(t)
	ctx := t.Context()
	if _, err := c.RegisterWorker(ctx, &pb.RegisterWorkerRequest{WorkerId: "w1", Capacity: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Enqueue(ctx, &pb.EnqueueRequest{Tasks: []*pb.NewTask{{TaskId: "t1", ScanId: "s", TargetRef: "x"}}}); err != nil {
		t.Fatal(err)
	}
	acq, err := c.Acquire(ctx, &pb.AcquireRequest{WorkerId: "w1", MaxTasks: 1, LeaseTtlSecs: 10})
	if err != nil || len(acq.GetTasks()) != 1 {
		t.Fatalf("Acquire = %v, %v, want one task", acq, err)
	}
	tok := acq.GetTasks()[0].GetLeaseToken()
	forged := bytes.Clone(tok)
	forged[len(forged)-1] ^= 1
	if _, err := c.RenewLease(ctx, &pb.RenewLeaseRequest{LeaseToken: forged}); err == nil {
		t.Fatal("RenewLease(forged token) succeeded; tokens must be sealed")
	}
	if _, err := c.RenewLease(ctx, &pb.RenewLeaseRequest{LeaseToken: tok, LeaseTtlSecs: 10}); err != nil {
		t.Fatal(err)
	}
	if n := srv.Renewals(); n != 1 {
		t.Errorf("Renewals() = %d, want 1 (the forged renewal is not one)", n)
	}
	srv.Advance(time.Minute) // past the lease and its heartbeat
	got, err := c.GetTask(ctx, &pb.GetTaskRequest{TaskId: "t1"})
	if err != nil {
		t.Fatal(err)
	}
	if st := got.GetTask().GetStatus(); st != distributed.TaskQueued.String() {
		t.Errorf("status after Advance = %s, want queued (the lease expired and recovery requeued it)", st)
	}
	_, err = c.GetTask(context.Background(), &pb.GetTaskRequest{TaskId: "nope"})
	if !errors.Is(err, distributed.ErrTaskNotFound) {
		t.Errorf("GetTask(unknown) = %v, want ErrTaskNotFound", err)
	}
}
