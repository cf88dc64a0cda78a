package main

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/termivar/distributed/client"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// TestServe_SIGTERMWithLongPoll: `serve` exits promptly on SIGTERM while a
// worker's Acquire long-poll of 30 s is pending (before, it waited about
// 10 s for its shutdown deadline), and the poll answers without waiting
// out its 30 s.
func TestServe_SIGTERMWithLongPoll(t *testing.T) {
	t.Parallel()
	n := startServe(t)
	c, err := client.New(client.Config{ServerURL: n.url, Key: n.key, MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if _, err := c.RegisterWorker(ctx, &pb.RegisterWorkerRequest{WorkerId: "w1", Capacity: 1}); err != nil {
		t.Fatal(err)
	}
	polled := make(chan time.Time, 1)
	go func() {
		_, _ = c.Acquire(ctx, &pb.AcquireRequest{WorkerId: "w1", WaitSecs: 30})
		polled <- time.Now()
	}()
	// The poll must be waiting inside the server before the SIGTERM.
	waitCond(t, "the long-poll to wait in the server", func() bool {
		st, err := c.Status(ctx, &pb.StatusRequest{})
		return err == nil && st.GetLongPollsWaiting() == 1
	})
	exited := make(chan struct{})
	go func() { _ = n.cmd.Wait(); close(exited) }()
	start := time.Now()
	if err := n.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not exit 20 s after SIGTERM")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("serve took %v to exit with a long-poll pending", d)
	}
	select {
	case at := <-polled:
		if d := at.Sub(start); d > 5*time.Second {
			t.Errorf("the long-poll returned %v after SIGTERM", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the long-poll did not return")
	}
}
