// Goal: a worker gets the capacity it declares. Without AdaptiveCapacity the
// agent reports no utilization, so a busy host does not shrink its
// capacity and it runs Capacity tasks at once; with it, the node scales
// the capacity down by the reported utilization (contract A.4) and the
// agent runs only that many. Method: the clienttest server; the host load
// is pinned high through UtilizationFunc; the handler holds every task
// until the expected number runs, then the node must have leased exactly
// that many (no free slot left) with the rest still queued.
package agent_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/termivar/distributed/agent"
	"github.com/termivar/distributed/client/clienttest"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

func busy() (uint32, uint32) { return 7500, 1000 }

// concurrency runs one agent with capacity 4 on a busy host over 8 tasks
// until want of them run at once, checks that the node leased no more, and
// returns the worker as the node lists it then.
func concurrency(t *testing.T, adaptive bool, want int) *pb.WorkerInfo {
	t.Helper()
	b := setup(t, clienttest.Options{})
	var mu sync.Mutex
	running := 0
	release := make(chan struct{})
	h := func(ctx context.Context, _ agent.Task) ([]byte, error) {
		mu.Lock()
		running++
		mu.Unlock()
		defer func() { mu.Lock(); running--; mu.Unlock() }()
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return []byte("ok"), nil
	}
	start(t, agent.Config{Client: b.c, WorkerID: "w1", Capacity: 4, PollWait: time.Second, HeartbeatInterval: 50 * time.Millisecond,
		AdaptiveCapacity: adaptive, UtilizationFunc: busy, Handler: h, Logger: testLogger(t)})
	enqueue(t, b.c, "s", "a", "b", "c", "d", "e", "f", "g", "h")
	waitFor(t, "tasks running at once", func() bool { mu.Lock(); defer mu.Unlock(); return running == want })
	ws, err := b.c.ListWorkers(context.Background(), &pb.ListWorkersRequest{})
	if err != nil || len(ws.GetWorkers()) != 1 {
		t.Fatalf("ListWorkers = %v, %v", ws, err)
	}
	w := ws.GetWorkers()[0]
	p, err := b.c.ScanProgress(context.Background(), &pb.ScanProgressRequest{ScanId: "s"})
	if err != nil || int(w.GetCurrentTasks()) != want || w.GetAvailableSlots() != 0 || int(p.GetQueued()) != 8-want {
		t.Fatalf("worker %v, progress %v, %v; want %d leased, no free slot, %d queued", w, p, err, want, 8-want)
	}
	close(release)
	return w
}

func TestAgent_CapacityIsDeclared(t *testing.T) {
	t.Parallel()
	w := concurrency(t, false, 4)
	if w.GetCapacity() != 4 || w.GetEffectiveCapacity() != 4 || w.GetCpuBasisPoints() != 0 || w.GetMemoryBasisPoints() != 0 {
		t.Fatalf("worker %v; want capacity 4 = effective, no utilization reported", w)
	}
}

func TestAgent_AdaptiveCapacityScalesDown(t *testing.T) {
	t.Parallel()
	w := concurrency(t, true, 1)
	// ceil(4 × (10000 − 7500) / 10000) = 1.
	if w.GetCapacity() != 4 || w.GetEffectiveCapacity() != 1 || w.GetCpuBasisPoints() != 7500 {
		t.Fatalf("worker %v; want capacity 4 scaled to 1 by cpu 75%%", w)
	}
}
