// Options.WakeFunc (wake.go): one call per tenant per applied entry with
// the entry's commands summed; none when no task is leasable after the
// entry; commands that cannot say wake everyone; a rejected command wakes
// nobody. Each case applies commands directly and
// records the calls.
package raftfsm

import (
	"errors"
	"fmt"
	"strconv"
	"testing"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/internal/notify"
)

// setupWake is setup with a WakeFunc that records its calls as
// "tenant:n" in *calls.
func setupWake(t *testing.T, calls *[]string) *testBundle {
	t.Helper()
	b := setup(t)
	b.f.opts.WakeFunc = func(tenant string, n int) { *calls = append(*calls, fmt.Sprintf("%s:%d", tenant, n)) }
	return b
}

// mustBatch applies cmds as one Batch entry; each must succeed.
func (b *testBundle) mustBatch(t *testing.T, cmds ...*pb.Command) {
	t.Helper()
	for _, c := range cmds {
		c.Version, c.Tenant = CommandVersion, "acme"
	}
	out := b.f.ApplyCommand(&pb.Command{Version: CommandVersion, NowSecs: b.now, Op: &pb.Command_Batch{Batch: &pb.Batch{Commands: cmds}}})
	for i, r := range out.([]Response) {
		if r.Err != nil {
			t.Fatalf("batch command %d (%T): %v", i, cmds[i].GetOp(), r.Err)
		}
	}
}

func TestFSM_WakeSummedPerEntry(t *testing.T) {
	t.Parallel()
	var calls []string
	b := setupWake(t, &calls)
	b.must(t, registerCmd("kw1", "w1"))
	b.must(t, enqueueCmd("kprod", "t1", "t2", "t3", "t4", "t5"))
	acq := valueOf[[]Acquired](t, b.must(t, acquireCmd("kw1", "w1", 4))) // t5 stays queued
	calls = nil
	// Three completions in one entry while t5 is leasable: one call of 3.
	b.mustBatch(t, completeCmd("kw1", acq[0].Lease, nil), completeCmd("kw1", acq[1].Lease, nil), completeCmd("kw1", acq[2].Lease, nil))
	if want := "[acme:3]"; fmt.Sprint(calls) != want {
		t.Fatalf("WakeFunc calls = %v, want %s", calls, want)
	}
	// An enqueue and a completion in one entry: summed.
	calls = nil
	b.mustBatch(t, enqueueCmd("kprod", "t6", "t7"), completeCmd("kw1", acq[3].Lease, nil))
	if want := "[acme:3]"; fmt.Sprint(calls) != want {
		t.Fatalf("WakeFunc calls = %v, want %s", calls, want)
	}
}

func TestFSM_WakeNeedsLeasable(t *testing.T) {
	t.Parallel()
	var calls []string
	b := setupWake(t, &calls)
	b.must(t, registerCmd("kw1", "w1"))
	b.must(t, enqueueCmd("kprod", "t1", "t2"))
	acq := valueOf[[]Acquired](t, b.must(t, acquireCmd("kw1", "w1", 2))) // queue empty
	advance := &pb.Command{Principal: "kadmin", Op: &pb.Command_AdvanceTime{AdvanceTime: &pb.AdvanceTime{}}}
	calls = nil
	// Completions, and a command that cannot say how many (a tick's
	// AdvanceTime), with no task leasable after them: no call.
	b.must(t, completeCmd("kw1", acq[0].Lease, nil))
	b.mustBatch(t, completeCmd("kw1", acq[1].Lease, nil))
	b.must(t, advance)
	if len(calls) != 0 {
		t.Fatalf("commands that left no leasable task called WakeFunc %v, want no call", calls)
	}
	// A rejected command wakes nobody either (an enqueue of an ID the
	// tenant holds; a completion by another worker's key).
	if r := b.apply(enqueueCmd("kprod", "t1")); r.Err == nil {
		t.Fatal("an enqueue of a held task ID was accepted")
	}
	if r := b.apply(completeCmd("kw2", acq[0].Lease, nil)); r.Err == nil {
		t.Fatal("a completion by another worker's key was accepted")
	}
	if len(calls) != 0 {
		t.Fatalf("rejected commands called WakeFunc %v, want no call", calls)
	}
	// With a task leasable, the enqueue wakes its one task's worth and
	// AdvanceTime every waiter.
	b.must(t, enqueueCmd("kprod", "t3"))
	b.must(t, advance)
	if want := fmt.Sprint([]string{"acme:1", fmt.Sprintf("acme:%d", notify.All)}); fmt.Sprint(calls) != want {
		t.Fatalf("WakeFunc calls = %v, want %s", calls, want)
	}
}

// TestFSM_AcquireRefused: an AcquireTasks refused on an empty queue says
// no task was leasable (the Acquire lost a race: it looks again); one
// refused a task that needs a tag the worker lacks says one was (it is
// not for this worker: the server wakes the waiters a broadcast would
// have). Other refusals carry no AcquireRefused.
func TestFSM_AcquireRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.must(t, registerCmd("kw1", "w1"))
	check := func(name string, r Response, leasable bool) {
		t.Helper()
		if !errors.Is(r.Err, distributed.ErrNoQueuedTask) || r.Value != (AcquireRefused{Leasable: leasable}) || RefusedLeasable(r) != leasable {
			t.Fatalf("%s: AcquireTasks = %+v, want ErrNoQueuedTask with AcquireRefused{Leasable: %v}", name, r, leasable)
		}
	}
	check("empty queue", b.apply(acquireCmd("kw1", "w1", 4)), false)
	e := enqueueCmd("kprod", "gpu1")
	e.GetEnqueue().Tasks[0].RequiredTags = []uint32{uint32(distributed.TagGPU)}
	b.must(t, e)
	check("a task w1's tags do not cover", b.apply(acquireCmd("kw1", "w1", 4)), true)
	r := b.apply(acquireCmd("kw1", "nobody", 1))
	if r.Err == nil || errors.Is(r.Err, distributed.ErrNoQueuedTask) || r.Value != nil || RefusedLeasable(r) {
		t.Fatalf("AcquireTasks of an unknown worker = %+v, want another error and no value", r)
	}
}

// TestFSM_AcquireResultSized: an AcquireTasks' value is allocated once at
// its final size when the queue holds fewer tasks than max_tasks (5 of
// 128: capacity 5; grown by append it was 8), and at max_tasks when the
// queue holds more.
func TestFSM_AcquireResultSized(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.must(t, &pb.Command{Principal: "kw1", Op: &pb.Command_RegisterWorker{RegisterWorker: &pb.RegisterWorker{Spec: &pb.WorkerSpec{WorkerId: "w1", Capacity: 64}}}})
	b.must(t, enqueueCmd("kprod", "a1", "a2", "a3", "a4", "a5"))
	acq := valueOf[[]Acquired](t, b.must(t, acquireCmd("kw1", "w1", 128)))
	if len(acq) != 5 || cap(acq) != 5 {
		t.Fatalf("AcquireTasks of 128 with 5 queued: len %d cap %d, want 5 and 5", len(acq), cap(acq))
	}
	var ids []string
	for i := range 12 {
		ids = append(ids, "b"+strconv.Itoa(i))
	}
	b.must(t, enqueueCmd("kprod", ids...))
	acq = valueOf[[]Acquired](t, b.must(t, acquireCmd("kw1", "w1", 3)))
	if len(acq) != 3 || cap(acq) != 3 {
		t.Fatalf("AcquireTasks of 3 with 12 queued: len %d cap %d, want 3 and 3", len(acq), cap(acq))
	}
}
