package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/termivar/distributed/client"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/server"
)

// TestSession_CancelledAcquireLeasesNothing: a caller that gives up a
// long-polling Acquire gets Canceled at once, and its message is
// cancelled on the server (session.go C6): the poll ends, and a task
// enqueued afterwards is not leased to nobody but to the next Acquire.
func TestSession_CancelledAcquireLeasesNothing(t *testing.T) {
	srv := newServer(t)
	g := h2cGate()
	c := sessionClient(t, srv, g, 0)
	registerW1(t, c)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, &pb.AcquireRequest{WorkerId: "w1", WaitSecs: 60})
		done <- err
	}()
	waitPolls(t, srv, "the acquire long-polls", func() bool { return srv.LongPollsWaiting() == 1 })
	cancel()
	if err := <-done; connect.CodeOf(err) != connect.CodeCanceled {
		t.Fatalf("given-up acquire: %v, want Canceled", err)
	}
	waitPolls(t, srv, "the server ends the cancelled poll", func() bool { return srv.LongPollsWaiting() == 0 })
	if _, err := c.Enqueue(context.Background(), oneTask("a")); err != nil {
		t.Fatal(err)
	}
	got, err := c.Acquire(context.Background(), &pb.AcquireRequest{WorkerId: "w1"})
	if err != nil || len(got.GetTasks()) != 1 || got.GetTasks()[0].GetTaskId() != "a" {
		t.Fatalf("acquire after the cancel: %v, %v; want task a", got, err)
	}
	if n := g.count("Session"); n != 1 {
		t.Fatalf("%d sessions opened, want 1: the cancel keeps the stream", n)
	}
}

// TestSession_NotifyMayCallTheClient: AcquireNotify's callback runs off
// the stream's reader (session.go C7): one that calls CompleteMany on the
// same Client, over the same session, gets its answer while the Acquire
// still waits, and the Acquire returns after it.
func TestSession_NotifyMayCallTheClient(t *testing.T) {
	_, g, c, lease := sessionWithLease(t)
	ctx := context.Background()
	item := &pb.CompleteRequest{LeaseToken: lease, Result: []byte("ok")}
	inCallback := make(chan error, 1)
	returned := make(chan error, 1)
	var callbackDone bool
	go func() {
		_, err := c.AcquireNotify(ctx, &pb.AcquireRequest{WorkerId: "w1", WaitSecs: 30, Complete: []*pb.CompleteRequest{item}}, func([]*pb.CompleteItemResult) {
			cm, err := c.CompleteMany(ctx, &pb.CompleteManyRequest{Items: []*pb.CompleteRequest{item}})
			if err == nil && !cm.GetResults()[0].GetResponse().GetAlreadyCompleted() {
				err = errors.New("the replay was not already_completed")
			}
			inCallback <- err
			callbackDone = true
		})
		if err == nil && !callbackDone {
			err = errors.New("AcquireNotify returned before its callback")
		}
		returned <- err
	}()
	select {
	case err := <-inCallback:
		if err != nil {
			t.Fatalf("CompleteMany in the callback: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("CompleteMany in the callback got no answer within 10 s: the session's reader is stalled")
	}
	if _, err := c.Enqueue(ctx, oneTask("b")); err != nil {
		t.Fatal(err)
	}
	if err := <-returned; err != nil {
		t.Fatal(err)
	}
	if g.count("CompleteMany") != 0 || g.count("Session") != 1 {
		t.Fatalf("CompleteMany calls %d, sessions %d; want 0, 1", g.count("CompleteMany"), g.count("Session"))
	}
}

// TestSession_OversizedMessageNotRetried: a message over the server's
// Worker request limit fails ResourceExhausted (message_too_large) at
// once, as its unary call does, not as a broken stream retried.
func TestSession_OversizedMessageNotRetried(t *testing.T) {
	srv := newServer(t)
	g := h2cGate()
	c := sessionClient(t, srv, g, 4)
	registerW1(t, c)
	big := &pb.CompleteRequest{LeaseToken: []byte("x"), Result: make([]byte, server.MaxWorkerRequestBytes+1)}
	_, err := c.Complete(context.Background(), big)
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Code != connect.CodeResourceExhausted || ce.Kind != server.KindMessageTooLarge || client.MayHaveApplied(err) {
		t.Fatalf("oversized complete: %v, want resource_exhausted %s, not applied", err, server.KindMessageTooLarge)
	}
	if n := g.count("Session"); n != 1 {
		t.Fatalf("%d sessions opened, want 1: the message was not retried", n)
	}
}
