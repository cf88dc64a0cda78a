// A background workload for the operations tests (backup under load,
// rolling upgrades): producers enqueue, workers acquire and complete,
// through every member, and a ledger records what was acknowledged; check
// proves that every acknowledged enqueue and completion is present once.
package main

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// opsLoad is a running workload on one tenant.
type opsLoad struct {
	t      *testing.T
	scan   string
	led    clusterLedger
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// startOpsLoad runs a producer per URL list in prodURLs and one worker
// through workURL until stop; task IDs are prefixed by scan.
func startOpsLoad(t *testing.T, c *tcluster, scan, prodKey, workKey string, prodURLs []string, workURL string) *opsLoad {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l := &opsLoad{t: t, scan: scan, cancel: cancel,
		led: clusterLedger{enqueued: map[string]bool{}, uncertain: map[string]bool{}, completed: map[string]string{}}}
	for p, u := range prodURLs {
		cl := c.client(u, prodKey)
		l.wg.Go(func() { l.produce(ctx, cl.Enqueue, p) })
	}
	wcl := c.client(workURL, workKey)
	id := scan + "-worker"
	if _, err := wcl.RegisterWorker(ctx, &pb.RegisterWorkerRequest{WorkerId: id, Capacity: 64}); err != nil && codeOf(err) != connect.CodeAlreadyExists {
		t.Fatalf("RegisterWorker %s: %v", id, err)
	}
	l.wg.Go(func() {
		for ctx.Err() == nil {
			ar, err := wcl.Acquire(ctx, &pb.AcquireRequest{WorkerId: id, WaitSecs: 1, MaxTasks: 16, Start: true, LeaseTtlSecs: 30})
			if err != nil {
				continue
			}
			for _, lt := range ar.GetTasks() {
				res := "result-" + lt.GetTaskId()
				if _, err := wcl.Complete(ctx, &pb.CompleteRequest{LeaseToken: lt.GetLeaseToken(), Result: []byte(res)}); err == nil {
					l.led.mu.Lock()
					l.led.completed[lt.GetTaskId()] = res
					l.led.mu.Unlock()
				}
			}
		}
	})
	return l
}

// produce enqueues batches of 4 tasks until ctx ends.
func (l *opsLoad) produce(ctx context.Context, enqueue func(context.Context, *pb.EnqueueRequest) (*pb.EnqueueResponse, error), p int) {
	for i := 0; ctx.Err() == nil; i++ {
		var tasks []*pb.NewTask
		for j := range 4 {
			tasks = append(tasks, &pb.NewTask{TaskId: fmt.Sprintf("%s-p%d-%d-%d", l.scan, p, i, j), ScanId: l.scan, TargetRef: "x"})
		}
		_, err := enqueue(ctx, &pb.EnqueueRequest{Tasks: tasks})
		l.led.mu.Lock()
		for _, tk := range tasks {
			if err == nil {
				l.led.enqueued[tk.GetTaskId()] = true
			} else {
				l.led.uncertain[tk.GetTaskId()] = true
			}
		}
		l.led.mu.Unlock()
	}
}

// acked returns copies of the acknowledged enqueues and completions so far.
func (l *opsLoad) acked() (enqueued map[string]bool, completed map[string]string) {
	l.led.mu.Lock()
	defer l.led.mu.Unlock()
	return maps.Clone(l.led.enqueued), maps.Clone(l.led.completed)
}

// counts returns how many enqueues and completions were acknowledged.
func (l *opsLoad) counts() (int, int) {
	l.led.mu.Lock()
	defer l.led.mu.Unlock()
	return len(l.led.enqueued), len(l.led.completed)
}

// waitProgress waits until at least enq more enqueues and done more
// completions were acknowledged than now. Its deadline is longer than
// waitCond's: on the shared 2-core machine under -race the workload has
// been seen to complete one task a second.
func (l *opsLoad) waitProgress(t *testing.T, what string, enq, done int) {
	t.Helper()
	e0, d0 := l.counts()
	waitWithin(t, fmt.Sprintf("%s: %d enqueues and %d completions", what, enq, done), 90*time.Second, func() bool {
		e, d := l.counts()
		return e >= e0+enq && d >= d0+done
	})
}

// stop ends the workload and waits for it.
func (l *opsLoad) stop() {
	l.cancel()
	l.wg.Wait()
}
