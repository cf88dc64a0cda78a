package agent

// Goal: a worker whose every slot is busy completes each finished task
// with the Acquire that fills its slot again (one call per task): no
// Complete call, every task completed with its result; a completion
// handed over when the loop is not waiting for a slot goes in a Complete
// of its own; and against a server that predates AcquireRequest.complete
// (it ignores the field) every carried completion falls back to exactly
// one Complete of its own, none reported done without it, none lost.
// Method: the clienttest server behind a transport that counts calls per
// RPC and the Acquires that carry completions, and, as an older server,
// strips the carried completions on the wire; a one-slot agent whose
// handler finishes a task only when the test releases it, which it does
// once the agent's test hook (events.go) reports the loop waiting for a
// slot with that task alone running — nothing but that task's hand-over
// ends such a wait. Every step waits on a hook event with a deadline,
// never on a sleep or a polled state. Each case runs in the loop's own
// order and with the loop held, after it answered a carried completion,
// until that task ended (the order in which an older server's refusal at
// capacity used to drop the agent's slots to 0).

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	distributed "github.com/termivar/distributed"
	"github.com/termivar/distributed/client"
	"github.com/termivar/distributed/client/clienttest"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"google.golang.org/protobuf/proto"
)

type rpcCounter struct {
	mu    sync.Mutex
	calls map[string]int
	// carrying counts the Acquires that carried completions.
	carrying int
	// olderServer drops AcquireRequest.complete from every Acquire on the
	// wire, as a server that predates the field ignores it (an unknown
	// field): its answer then has no Completed.
	olderServer bool
}

func (c *rpcCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	rpc := r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]
	c.mu.Lock()
	c.calls[rpc]++
	c.mu.Unlock()
	if rpc == "Acquire" {
		if err := c.inspectAcquire(r); err != nil {
			return nil, err
		}
	}
	return http.DefaultTransport.RoundTrip(r)
}

// inspectAcquire counts the Acquire request r (a Connect unary call: the
// body is the bare protobuf message) if it carries completions, and
// rewrites it without them as an older server.
func (c *rpcCounter) inspectAcquire(r *http.Request) error {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return err
	}
	r.Body.Close()
	var req pb.AcquireRequest
	if err := proto.Unmarshal(body, &req); err != nil {
		return err
	}
	if len(req.Complete) > 0 {
		c.mu.Lock()
		c.carrying++
		c.mu.Unlock()
	}
	if c.olderServer {
		req.Complete = nil
		if body, err = proto.Marshal(&req); err != nil {
			return err
		}
	}
	r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	return nil
}

func (c *rpcCounter) count(rpc string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[rpc]
}

func (c *rpcCounter) carried() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.carrying
}

// eventLog records the agent's hook events for the test to wait on.
type eventLog struct {
	t     *testing.T
	ended map[string]chan struct{} // closed at the task's evFinished
	// holdLoop: the loop, having answered a carried completion, waits
	// until that task ended before it goes on.
	holdLoop bool

	mu       sync.Mutex
	evs      []loopEvent
	from     int // await looks at evs[from:]
	finished map[string]int
	more     chan struct{} // a value after each append (buffer 1)
}

func newEventLog(t *testing.T, ids []string, holdLoop bool) *eventLog {
	l := &eventLog{t: t, ended: map[string]chan struct{}{}, holdLoop: holdLoop, finished: map[string]int{}, more: make(chan struct{}, 1)}
	for _, id := range ids {
		l.ended[id] = make(chan struct{})
	}
	return l
}

// hook is the agent's hook: it runs on the agent's goroutines.
func (l *eventLog) hook(ev loopEvent) {
	switch {
	case ev.kind == evFinished:
		l.mu.Lock()
		l.finished[ev.taskID]++
		if l.finished[ev.taskID] == 1 {
			close(l.ended[ev.taskID])
		}
		l.mu.Unlock()
	case ev.kind == evCarried && l.holdLoop:
		l.waitEnded(ev.taskID)
	}
	l.mu.Lock()
	l.evs = append(l.evs, ev)
	l.mu.Unlock()
	select {
	case l.more <- struct{}{}:
	default: // a wake-up is pending already
	}
}

// waitEnded holds the loop until task id ended, up to 10 s.
func (l *eventLog) waitEnded(id string) {
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	select {
	case <-l.ended[id]:
	case <-timeout.C:
		l.t.Errorf("%s did not end within 10 s of its carried completion's answer", id)
	}
}

// mark makes await look only at events from now on.
func (l *eventLog) mark() {
	l.mu.Lock()
	l.from = len(l.evs)
	l.mu.Unlock()
}

// await returns the first event since the last mark for which ok holds,
// waiting for it up to 10 s.
func (l *eventLog) await(what string, ok func(loopEvent) bool) loopEvent {
	l.t.Helper()
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for {
		l.mu.Lock()
		for _, ev := range l.evs[l.from:] {
			if ok(ev) {
				l.mu.Unlock()
				return ev
			}
		}
		l.mu.Unlock()
		select {
		case <-l.more:
		case <-timeout.C:
			l.t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// count returns how many recorded events ok holds for.
func (l *eventLog) count(ok func(loopEvent) bool) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, ev := range l.evs {
		if ok(ev) {
			n++
		}
	}
	return n
}

// waitingAlone: the loop waits for a slot, taking hand-overs, none handed
// over yet, with task id alone running.
func waitingAlone(id string) func(loopEvent) bool {
	return func(ev loopEvent) bool {
		return ev.kind == evSlotWait && ev.waiting && ev.carried == 0 && slices.Equal(ev.running, []string{id})
	}
}

func isEvent(kind loopEventKind, id string) func(loopEvent) bool {
	return func(ev loopEvent) bool { return ev.kind == kind && ev.taskID == id }
}

// handoffRun is one run of a one-slot agent over four tasks.
type handoffRun struct {
	a   *Agent
	c   *client.Client
	rc  *rpcCounter
	log *eventLog
	ids []string
}

// runOneSlotAgent runs a one-slot agent over four tasks, releasing each
// task's handler once the loop waits for a slot with that task alone
// running, and checks that the server answered each carried completion
// (or, olderServer, none), that every task ended once with its result
// stored, and the agent's counts.
func runOneSlotAgent(t *testing.T, olderServer, holdLoop bool) handoffRun {
	t.Helper()
	srv, err := clienttest.New(clienttest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	rc := &rpcCounter{calls: map[string]int{}, olderServer: olderServer}
	c, err := client.New(client.Config{ServerURL: srv.URL, Key: srv.Key, HTTPClient: &http.Client{Transport: rc}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	run := handoffRun{c: c, rc: rc, ids: []string{"t0", "t1", "t2", "t3"}}
	release := map[string]chan struct{}{}
	for _, id := range run.ids {
		release[id] = make(chan struct{})
		if _, err := c.Enqueue(context.Background(), &pb.EnqueueRequest{Tasks: []*pb.NewTask{{TaskId: id, ScanId: "s", TargetRef: "x"}}}); err != nil {
			t.Fatal(err)
		}
	}
	run.a, err = New(Config{Client: c, WorkerID: "w1", Capacity: 1, HeartbeatInterval: time.Hour, Grace: time.Second,
		Handler: func(ctx context.Context, tk Task) ([]byte, error) {
			select {
			case <-release[tk.TaskID]:
			case <-ctx.Done():
			}
			return []byte("result-" + tk.TaskID), nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	run.log = newEventLog(t, run.ids, holdLoop)
	run.a.hook = run.log.hook
	stop := startRun(t, run.a)
	for i, id := range run.ids {
		run.log.await("the loop waiting for a slot with "+id+" alone running", waitingAlone(id))
		run.log.mark()
		close(release[id])
		if run.rides(i) {
			ev := run.log.await(id+"'s carried completion answered", isEvent(evCarried, id))
			if ev.acked == olderServer {
				t.Fatalf("%s: the server answered for the carried completion: %v, want %v", id, ev.acked, !olderServer)
			}
		}
		run.log.await(id+" ended", isEvent(evFinished, id))
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	run.checkEnded(t)
	return run
}

// rides says whether the i-th task's completion rides on an Acquire: every
// one against a server that answers for them; against an older server
// the first carryStrikeLimit, and then none (carryPause).
func (run handoffRun) rides(i int) bool {
	return !run.rc.olderServer || i < carryStrikeLimit
}

// startRun runs a until the returned stop (also a cleanup) ends it.
func startRun(t *testing.T, a *Agent) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			err = <-done
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// checkEnded checks, after the run, that every task ended once, its
// completion answered once, and is completed with its own result.
func (run handoffRun) checkEnded(t *testing.T) {
	t.Helper()
	for i, id := range run.ids {
		if n := run.log.count(isEvent(evFinished, id)); n != 1 {
			t.Errorf("%s ended %d times, want 1", id, n)
		}
		want := 0
		if run.rides(i) {
			want = 1
		}
		if n := run.log.count(isEvent(evCarried, id)); n != want {
			t.Errorf("%s's carried completion answered %d times, want %d", id, n, want)
		}
		r, err := run.c.GetTask(context.Background(), &pb.GetTaskRequest{TaskId: id})
		if err != nil || r.GetTask().GetStatus() != "completed" || !r.GetTask().GetHasResult() {
			t.Errorf("%s: %v, %v", id, r.GetTask(), err)
		}
	}
	results := map[string]string{}
	if err := run.c.Results(context.Background(), "s", func(id string, res []byte) error {
		results[id] = string(res)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, id := range run.ids {
		if results[id] != "result-"+id {
			t.Errorf("%s's stored result %q, want %q", id, results[id], "result-"+id)
		}
	}
	want := Stats{Acquired: 4, Completed: 4, Registrations: 1}
	if s := run.a.Stats(); s != want {
		t.Errorf("stats %+v, want %+v", s, want)
	}
	if n := run.rc.carried(); !run.rc.olderServer && n != len(run.ids) {
		t.Errorf("%d Acquires carried completions, want %d: one per task", n, len(run.ids))
	}
}

// inBothOrders runs f as parallel subtests in the loop's own order and
// with the loop held, after it answered a carried completion, until that
// task ended.
func inBothOrders(t *testing.T, f func(t *testing.T, holdLoop bool)) {
	for name, hold := range map[string]bool{"loop order": false, "task ends first": true} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f(t, hold)
		})
	}
}

func TestAgent_CompletionsRideOnAcquire(t *testing.T) {
	t.Parallel()
	inBothOrders(t, func(t *testing.T, holdLoop bool) {
		run := runOneSlotAgent(t, false, holdLoop)
		if n := run.rc.count("Complete") + run.rc.count("CompleteMany"); n != 0 {
			t.Fatalf("%d completion calls, want 0: every completion rides on an Acquire", n)
		}
		// Not waiting for a slot: the completion goes in a call of its own.
		if err, ok := run.a.completeCarried(context.Background(), "t9", &pb.CompleteRequest{}); ok || err != nil {
			t.Fatalf("handed over while no loop waits: %v, %v", err, ok)
		}
	})
}

// TestAgent_CarriedCompletionsAgainstOlderServer: a server without
// AcquireRequest.complete ignores the carried completions (refusing the
// Acquire at capacity while tasks are queued, answering no Completed for
// the last); each task then completes with exactly one Complete of its
// own, with its result, none lost or left leased, and the agent goes on
// leasing (it does not take the refusal for a capacity of 0); after
// carryStrikeLimit such Acquires the completions stop riding (each had
// cost a refused call before its Complete).
func TestAgent_CarriedCompletionsAgainstOlderServer(t *testing.T) {
	t.Parallel()
	inBothOrders(t, func(t *testing.T, holdLoop bool) {
		run := runOneSlotAgent(t, true, holdLoop)
		if n := run.rc.count("Complete"); n != 4 {
			t.Fatalf("%d Complete calls, want 4: each carried completion the server ignored falls back to one call of its own", n)
		}
		if n := run.rc.count("CompleteMany"); n != 0 {
			t.Fatalf("%d CompleteMany calls, want 0", n)
		}
		if n := run.rc.carried(); n != carryStrikeLimit {
			t.Fatalf("%d Acquires carried completions, want %d: after that many refused, completions stop riding", n, carryStrikeLimit)
		}
	})
}

// TestAgent_SlotWaitOutlastsStaleSignals: the slot wait, every slot
// busy, is not ended by a slot signal that finds no slot free (a task
// that ended before the wait began): a completion handed over after it
// still rides. A slot that comes free ends it without a hand-over, and
// soft's end hands every completion back. The wait runs alone (no
// server); the loop's hook events say when it re-began to wait.
func TestAgent_SlotWaitOutlastsStaleSignals(t *testing.T) {
	t.Parallel()
	a := &Agent{slots: 1, running: map[string]*running{"t1": {}}, slotFree: make(chan struct{}, 1), carryCh: make(chan struct{}, 1)}
	evs := make(chan loopEvent, 64)
	a.hook = func(ev loopEvent) { evs <- ev }
	type ended struct {
		hs         []*handoff
		free, held int
	}
	wait := func(ctx context.Context) <-chan ended {
		a.mu.Lock()
		a.slotWaiting = true // as acquireNext does
		a.mu.Unlock()
		out := make(chan ended, 1)
		go func() {
			hs, free, held := a.waitSlot(ctx)
			out <- ended{hs, free, held}
		}()
		return out
	}
	nextEvent := func(what string, kind loopEventKind) loopEvent {
		t.Helper()
		select {
		case ev := <-evs:
			if ev.kind != kind {
				t.Fatalf("%s: event %+v", what, ev)
			}
			return ev
		case <-time.After(10 * time.Second):
			t.Fatalf("timed out waiting for %s", what)
		}
		panic("unreachable")
	}

	a.signalSlot() // stale: no slot is free
	out := wait(context.Background())
	nextEvent("the wait", evSlotWait)
	select {
	case e := <-out:
		t.Fatalf("the stale signal ended the wait: %+v", e)
	case ev := <-evs:
		if ev.kind != evSlotWait || !ev.waiting || !slices.Equal(ev.running, []string{"t1"}) {
			t.Fatalf("after the stale signal: %+v", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting for the wait to begin again after the stale signal")
	}
	carried := make(chan error, 1)
	go func() {
		err, ok := a.completeCarried(context.Background(), "t1", &pb.CompleteRequest{})
		if !ok {
			err = errNotCarried
		}
		carried <- err
	}()
	e := recvWithin(t, "the hand-over to end the wait", out)
	if len(e.hs) != 1 || e.hs[0].taskID != "t1" || e.free != 0 || e.held != 1 {
		t.Fatalf("the wait ended with %d hand-overs, %d free, %d held; want t1's, 0, 1", len(e.hs), e.free, e.held)
	}
	a.settle(e.hs[0], nil)
	if err := recvWithin(t, "t1's outcome", carried); err != nil {
		t.Fatalf("t1's completion: %v, want carried", err)
	}
	nextEvent("t1's answer", evCarried)

	// A slot comes free: the wait ends with nothing handed over.
	out = wait(context.Background())
	nextEvent("the second wait", evSlotWait)
	a.mu.Lock()
	delete(a.running, "t1")
	a.mu.Unlock()
	a.signalSlot()
	if e := recvWithin(t, "the free slot to end the wait", out); len(e.hs) != 0 || e.free != 1 || e.held != 0 || a.slotWaiting {
		t.Fatalf("a slot free: %+v, waiting %v", e, a.slotWaiting)
	}

	// soft ends: a completion handed over is handed back.
	a.running["t2"] = &running{}
	ctx, cancel := context.WithCancel(context.Background())
	out = wait(ctx)
	nextEvent("the third wait", evSlotWait)
	a.mu.Lock()
	h := &handoff{taskID: "t2", done: make(chan error, 1)}
	a.carried = append(a.carried, h) // as completeCarried does, without its signal
	a.mu.Unlock()
	cancel()
	if e := recvWithin(t, "soft's end to end the wait", out); len(e.hs) != 0 {
		t.Fatalf("soft ended: %+v", e)
	}
	if err := recvWithin(t, "t2's completion handed back", h.done); !errors.Is(err, errNotCarried) {
		t.Fatalf("handed back %v, want errNotCarried", err)
	}
}

// recvWithin receives from ch, failing the test after 10 s.
func recvWithin[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
	panic("unreachable")
}

// TestAgent_CarryStrikes: completions stop riding only after
// carryStrikeLimit carrying Acquires in a row that the server did not
// answer for (refused at capacity, or no Completed); one it answered for
// resets the count, and a failure that says nothing of the field (the
// server unreachable) counts neither way.
func TestAgent_CarryStrikes(t *testing.T) {
	answered := &pb.AcquireResponse{Completed: []*pb.CompleteItemResult{{}}}
	unreachable := errors.New("dial tcp: connection refused")
	for _, tc := range []struct {
		name   string
		steps  []error // nil: answered for its one completion; errNoCompleted: answered without Completed
		paused bool
	}{
		{"two refusals", []error{distributed.ErrWorkerAtCapacity, distributed.ErrWorkerAtCapacity}, true},
		{"two answers without Completed", []error{errNoCompleted, errNoCompleted}, true},
		{"an answer between", []error{distributed.ErrWorkerAtCapacity, nil, distributed.ErrWorkerAtCapacity}, false},
		{"unreachable between", []error{distributed.ErrWorkerAtCapacity, unreachable, errNoCompleted}, true},
		{"unreachable only", []error{unreachable, unreachable, unreachable}, false},
	} {
		a := &Agent{log: slog.New(slog.DiscardHandler)}
		for _, err := range tc.steps {
			switch err {
			case nil:
				a.carryOutcome(1, answered, nil)
			case errNoCompleted:
				a.carryOutcome(1, &pb.AcquireResponse{}, nil)
			default:
				a.carryOutcome(1, nil, err)
			}
		}
		if paused := time.Now().Before(a.carryOffUntil); paused != tc.paused {
			t.Errorf("%s: paused %v, want %v", tc.name, paused, tc.paused)
		}
	}
}

var errNoCompleted = errors.New("answered without Completed")
