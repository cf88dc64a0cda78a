package agent

// Goal: a worker whose every slot is busy completes each finished task
// with the Acquire that fills its slot again (one call per task): no
// Complete call, every task completed with its result; and a completion
// handed over when the loop is not waiting for a slot goes in a Complete
// of its own. Method: the clienttest server behind a transport that counts
// calls per RPC; a one-slot agent whose handler finishes a task only when
// the test releases it, which it does once the acquire loop waits for a
// slot with nothing else to wake it (read under the agent's mutex, polled
// with a deadline).

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/termivar/distributed/client"
	"github.com/termivar/distributed/client/clienttest"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

type rpcCounter struct {
	mu    sync.Mutex
	calls map[string]int
}

func (c *rpcCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.calls[r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]]++
	c.mu.Unlock()
	return http.DefaultTransport.RoundTrip(r)
}

func (c *rpcCounter) count(rpc string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[rpc]
}

func pollUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// onlyCarryCanWake reports whether the acquire loop waits for a slot and
// only a handed-over completion can wake it: one task running, no slot
// signal pending.
func (a *Agent) onlyCarryCanWake() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.slotWaiting && len(a.running) == 1 && len(a.slotFree) == 0
}

func TestAgent_CompletionsRideOnAcquire(t *testing.T) {
	t.Parallel()
	srv, err := clienttest.New(clienttest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	rc := &rpcCounter{calls: map[string]int{}}
	c, err := client.New(client.Config{ServerURL: srv.URL, Key: srv.Key, HTTPClient: &http.Client{Transport: rc}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ids := []string{"t0", "t1", "t2", "t3"}
	for _, id := range ids {
		if _, err := c.Enqueue(context.Background(), &pb.EnqueueRequest{Tasks: []*pb.NewTask{{TaskId: id, ScanId: "s", TargetRef: "x"}}}); err != nil {
			t.Fatal(err)
		}
	}
	release := make(chan struct{})
	a, err := New(Config{Client: c, WorkerID: "w1", Capacity: 1, HeartbeatInterval: time.Hour, UtilizationFunc: func() (uint32, uint32) { return 0, 0 },
		Handler: func(ctx context.Context, tk Task) ([]byte, error) {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return []byte("result-" + tk.TaskID), nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	for i := range ids {
		pollUntil(t, "the loop waiting for a slot", a.onlyCarryCanWake)
		release <- struct{}{}
		pollUntil(t, "the completion", func() bool { return a.Stats().Completed == int64(i+1) })
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := rc.count("Complete") + rc.count("CompleteMany"); n != 0 {
		t.Fatalf("%d completion calls, want 0: every completion rides on an Acquire", n)
	}
	for _, id := range ids {
		r, err := c.GetTask(context.Background(), &pb.GetTaskRequest{TaskId: id})
		if err != nil || r.GetTask().GetStatus() != "completed" || !r.GetTask().GetHasResult() {
			t.Fatalf("%s: %v, %v", id, r.GetTask(), err)
		}
	}

	// Not waiting for a slot: the completion goes in a call of its own.
	if err, ok := a.completeCarried(context.Background(), &pb.CompleteRequest{}); ok || err != nil {
		t.Fatalf("handed over while no loop waits: %v, %v", err, ok)
	}
}
