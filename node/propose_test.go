// Tests for the proposer (propose.go). Goal: proposals that wait together
// become one log entry, an entry holds exactly up to MaxBatchCommands
// commands, every proposer gets its own answer, and a failed entry fails
// every proposer in it. Method: the proposer runs against stubRaft (the
// raftApplier seam), which records every entry and applies it to a real
// raftfsm.FSM (or fails it); proposals are queued before the loop starts,
// so what is coalesced is decided by the code, not by timing.
//
// Mutants these tests kill (scripts/mutants.txt):
//   - node/propose-no-coalescing: the drain loop takes no waiting
//     proposal (`len(batch) < 1`): TestProposer_Coalesces sees 10 entries.
//   - node/propose-batch-bound-plus-one (`<=` for `<`) and
//     node/propose-batch-bound-minus-one (`pr.maxBatch-1`):
//     TestProposer_BatchBoundIsExact sees entries of bound+1 (which the FSM
//     rejects whole at raftfsm.MaxBatchCommands) or bound-1 commands.
//   - node/propose-failure-notifies-first-only: a failed entry answers
//     only its first proposer: TestProposer_FailedEntryFailsEveryProposer
//     sees the others get no answer.
//   - node/own-entry-never-forgotten: settle leaves a failed entry in
//     OwnEntries: TestProposer_OwnEntriesHoldOnlyEntriesInFlight sees it.
package node

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/internal/wire"
	"github.com/termivar/distributed/raftfsm"
)

// stubRaft is a raftApplier that records each entry's command count and
// applies the entry to fsm at once, or fails it (every entry after
// failAfter) with failErr: as raft
// fails an entry it refused (index 0) or, with failAppended, one it had
// appended (the entry's index).
type stubRaft struct {
	fsm          *raftfsm.FSM
	failErr      error
	failAppended bool
	failAfter    uint64 // entries up to this index are applied

	mu      sync.Mutex
	index   uint64
	entries []int // commands per entry, in order
}

func (s *stubRaft) Apply(data []byte, _ time.Duration) raft.ApplyFuture {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.index++
	cmd, err := raftfsm.DecodeEntry(s.index, data)
	if err != nil {
		return stubFuture{err: err}
	}
	count := 1
	if b := cmd.GetBatch(); b != nil {
		count = len(b.GetCommands())
	}
	s.entries = append(s.entries, count)
	if s.failErr != nil && s.index > s.failAfter && s.failAppended {
		return stubFuture{index: s.index, err: s.failErr}
	}
	if s.failErr != nil && s.index > s.failAfter {
		return stubFuture{err: s.failErr}
	}
	return stubFuture{index: s.index, resp: s.fsm.Apply(&raft.Log{Index: s.index, Data: data})}
}

func (s *stubRaft) entrySizes() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.entries)
}

// stubFuture is an ApplyFuture that is already resolved.
type stubFuture struct {
	index uint64
	resp  any
	err   error
}

func (f stubFuture) Error() error  { return f.err }
func (f stubFuture) Index() uint64 { return f.index }
func (f stubFuture) Response() any { return f.resp }

type proposerBundle struct {
	stub  *stubRaft
	pr    *proposer
	fsm   *raftfsm.FSM
	start func() // starts the proposer's loops
}

// setupProposer returns a proposer over a stubRaft whose FSM holds the
// system tenant at the hard ceilings; the loops start with start.
func setupProposer(t *testing.T, maxBatch int, failErr error) *proposerBundle {
	t.Helper()
	return setupProposerBytes(t, maxBatch, DefaultMaxEntryBytes, failErr)
}

// setupProposerBytes is setupProposer with entries bounded to maxBytes of
// commands.
func setupProposerBytes(t *testing.T, maxBatch, maxBytes int, failErr error) *proposerBundle {
	t.Helper()
	return setupProposerOpts(t, maxBatch, maxBytes, failErr, raftfsm.Options{})
}

// setupProposerOpts is setupProposerBytes with the stub FSM's options.
func setupProposerOpts(t *testing.T, maxBatch, maxBytes int, failErr error, opts raftfsm.Options) *proposerBundle {
	t.Helper()
	f := raftfsm.New(opts)
	for _, cmd := range []*pb.Command{
		{Op: &pb.Command_InitCluster{InitCluster: &pb.InitCluster{EpochId: make([]byte, raftfsm.EpochBytes)}}},
		{Op: &pb.Command_CreateTenant{CreateTenant: &pb.CreateTenant{Name: raftfsm.SystemTenant,
			Limits: wire.LimitsToProto(distributed.MaximumLimits())}}},
	} {
		cmd.Version, cmd.NowSecs = raftfsm.CommandVersion, 1
		if r := f.ApplyCommand(cmd).(raftfsm.Response); r.Err != nil {
			t.Fatalf("setup %T: %v", cmd.GetOp(), r.Err)
		}
	}
	stub := &stubRaft{fsm: f, failErr: failErr}
	ctx, cancel := context.WithCancel(context.Background())
	clock := func() time.Time { return time.Unix(1_000, 0) }
	pr := newProposer(stub, f.LastTime, clock, entryBounds{commands: maxBatch, bytes: maxBytes}, ctx.Done())
	b := &proposerBundle{stub: stub, pr: pr, fsm: f}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	b.start = func() {
		wg.Go(func() { pr.run(ctx) })
		wg.Go(func() { pr.respond(ctx) })
	}
	return b
}

// queue submits n proposals before the loop runs, so that they all wait
// together: SetNodeInfo for nodes prefix-0 … prefix-(n-1) (cheap for the
// FSM even in race builds, where every core command runs a full audit).
func (b *proposerBundle) queue(t *testing.T, prefix string, n int) []*proposal {
	t.Helper()
	props := make([]*proposal, n)
	for i := range props {
		id := fmt.Sprintf("%s-%d", prefix, i)
		cmd := &pb.Command{Op: &pb.Command_SetNodeInfo{SetNodeInfo: &pb.SetNodeInfo{NodeId: id, ApiUrl: "http://" + id}}}
		p, err := b.pr.submit(context.Background(), cmd)
		if err != nil {
			t.Fatalf("submit %d: %v", i, err)
		}
		props[i] = p
	}
	return props
}

// results waits for every proposal's answer; the deadline only bounds a
// failing run (a proposer that is never answered).
func results(t *testing.T, props []*proposal) []proposalResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := make([]proposalResult, len(props))
	for i, p := range props {
		resp, err := p.wait(ctx)
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("proposal %d of %d was never answered", i, len(props))
		}
		out[i] = proposalResult{resp: resp, err: err}
	}
	return out
}

func TestProposer_Coalesces(t *testing.T) {
	t.Parallel()
	b := setupProposer(t, 64, nil)
	props := b.queue(t, "t", 10)
	b.start()
	for i, r := range results(t, props) {
		if r.err != nil || r.resp.Err != nil {
			t.Fatalf("proposal %d: %v %v", i, r.err, r.resp.Err)
		}
	}
	if got := b.stub.entrySizes(); !slices.Equal(got, []int{10}) {
		t.Fatalf("entries = %v, want one entry of 10 commands", got)
	}
	for i := range 10 {
		id := fmt.Sprintf("t-%d", i)
		if u, ok := b.fsm.NodeAPIURL(id); !ok || u != "http://"+id {
			t.Fatalf("node %s: URL %q (recorded %v), want http://%s", id, u, ok, id)
		}
	}
}

func TestProposer_BatchBoundIsExact(t *testing.T) {
	t.Parallel()
	for _, bound := range []int{1, 8, raftfsm.MaxBatchCommands} {
		for _, tc := range []struct {
			n    int
			want []int
		}{
			{bound, []int{bound}},
			{bound + 1, []int{bound, 1}},
		} {
			t.Run(fmt.Sprintf("bound=%d/n=%d", bound, tc.n), func(t *testing.T) {
				t.Parallel()
				b := setupProposer(t, bound, nil)
				props := b.queue(t, "t", tc.n)
				b.start()
				for i, r := range results(t, props) {
					if r.err != nil || r.resp.Err != nil {
						t.Fatalf("proposal %d: %v %v", i, r.err, r.resp.Err)
					}
				}
				if got := b.stub.entrySizes(); !slices.Equal(got, tc.want) {
					t.Fatalf("entry sizes = %v, want %v", got, tc.want)
				}
			})
		}
	}
}

// An entry takes no further proposal once its commands reach the byte
// bound: ten 64 KiB completions under a 256 KiB bound are entries of 4, 4
// and 2 (each entry the bound plus at most one proposal); small commands
// still coalesce up to the command bound (TestProposer_Coalesces).
func TestProposer_EntryBytesBound(t *testing.T) {
	t.Parallel()
	b := setupProposerBytes(t, 64, 256<<10, nil)
	result := make([]byte, 64<<10)
	props := make([]*proposal, 10)
	for i := range props {
		// NB: the lease is not valid: each command fails in the FSM, which
		// does not matter here; what is measured is the entries.
		cmd := &pb.Command{Tenant: raftfsm.SystemTenant, Op: &pb.Command_CompleteTask{CompleteTask: &pb.CompleteTask{Lease: []byte{byte(i)}, Result: result}}}
		p, err := b.pr.submit(context.Background(), cmd)
		if err != nil {
			t.Fatal(err)
		}
		props[i] = p
	}
	b.start()
	for i, r := range results(t, props) {
		if r.err != nil {
			t.Fatalf("proposal %d: %v", i, r.err)
		}
	}
	if got := b.stub.entrySizes(); !slices.Equal(got, []int{4, 4, 2}) {
		t.Fatalf("entries = %v, want 4, 4 and 2 commands", got)
	}
}

// TestProposer_FailedEntryFailsEveryProposer: every proposer of a failed
// entry gets the entry's error, mapped to the node's; one that failed after
// raft appended the entry (leadership lost, a shutdown after the commit)
// is marked ErrOutcomeUnknown, since a later leader may still apply it,
// and one raft refused before the log is not. (Before, ErrLeadershipLost
// was a bare ErrNotLeader: the server answered not_leader without an
// unknown outcome, and the client re-sent calls that are not safe to
// replay.)
func TestProposer_FailedEntryFailsEveryProposer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		failErr  error
		appended bool
		want     error
	}{
		{"raft error", errors.New("disk on fire"), false, nil},
		{"raft error after the append", errors.New("disk on fire"), true, nil},
		{"leadership lost", raft.ErrLeadershipLost, true, ErrNotLeader},
		{"not leader", raft.ErrNotLeader, false, ErrNotLeader},
		{"transfer in progress", raft.ErrLeadershipTransferInProgress, false, ErrNotLeader},
		{"shutdown", raft.ErrRaftShutdown, false, ErrClosed},
		{"shutdown after the commit", raft.ErrRaftShutdown, true, ErrClosed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			want := tc.want
			if want == nil {
				want = tc.failErr
			}
			b := setupProposer(t, 64, tc.failErr)
			b.stub.failAppended = tc.appended
			props := b.queue(t, "t", 5)
			b.start()
			for i, r := range results(t, props) {
				if !errors.Is(r.err, want) {
					t.Errorf("proposal %d: err = %v, want %v", i, r.err, want)
				}
				if got := errors.Is(r.err, ErrOutcomeUnknown); got != tc.appended {
					t.Errorf("proposal %d: err = %v; outcome unknown %v, want %v", i, r.err, got, tc.appended)
				}
			}
			if got := b.stub.entrySizes(); !slices.Equal(got, []int{5}) {
				t.Fatalf("entries = %v, want one entry of 5", got)
			}
		})
	}
}

// TestNode_ProposeAllPartlyApplied: a ProposeAll whose first entry is
// applied and whose second raft refuses before the log fails whole with
// the refusal, marked ErrOutcomeUnknown (its first command took effect: a
// caller must not report the call as one that changed nothing); when every
// entry is refused the refusal stays definite.
func TestNode_ProposeAllPartlyApplied(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		failAfter uint64
		unknown   bool
	}{
		{"first applied", 1, true},
		{"none applied", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setupProposer(t, 1, raft.ErrNotLeader) // NB: one command per entry
			b.stub.failAfter = tc.failAfter
			b.start()
			n := &Node{fsm: b.fsm, prop: b.pr, hl: newHealth()}
			cmds := []*pb.Command{enqueue(raftfsm.SystemTenant, "a"), enqueue(raftfsm.SystemTenant, "b")}
			_, err := n.ProposeAll(context.Background(), cmds)
			if !errors.Is(err, ErrNotLeader) || errors.Is(err, ErrOutcomeUnknown) != tc.unknown {
				t.Fatalf("ProposeAll = %v; want ErrNotLeader, outcome unknown %v", err, tc.unknown)
			}
			tv, _ := b.fsm.Tenant(raftfsm.SystemTenant)
			if _, found, _ := tv.GetTask("a"); found != tc.unknown {
				t.Fatalf("task a applied = %v, want %v", found, tc.unknown)
			}
		})
	}
}

func TestProposer_EachProposerGetsItsOwnResponse(t *testing.T) {
	t.Parallel()
	b := setupProposer(t, 64, nil)
	var props []*proposal
	for _, id := range []string{"t-0", "t-1", "t-2", "t-1"} {
		p, err := b.pr.submit(context.Background(), enqueue(raftfsm.SystemTenant, id))
		if err != nil {
			t.Fatal(err)
		}
		props = append(props, p)
	}
	// The duplicate task ID in the same entry: only its proposer is refused.
	b.start()
	rs := results(t, props)
	for i, r := range rs[:3] {
		if r.err != nil || r.resp.Err != nil {
			t.Fatalf("proposal %d: %v %v", i, r.err, r.resp.Err)
		}
	}
	if rs[3].err != nil || !errors.Is(rs[3].resp.Err, distributed.ErrTaskAlreadyExists) {
		t.Fatalf("duplicate: err %v, response %v; want ErrTaskAlreadyExists", rs[3].err, rs[3].resp.Err)
	}
	if got := b.stub.entrySizes(); !slices.Equal(got, []int{4}) {
		t.Fatalf("entries = %v, want one entry of 4", got)
	}
}

func TestProposer_ClosedRefusesAndFailsPending(t *testing.T) {
	t.Parallel()
	b := setupProposer(t, 64, nil)
	ctx, cancel := context.WithCancel(context.Background())
	b.pr.closed = ctx.Done()
	props := b.queue(t, "t", 3)
	cancel()
	b.pr.failPending()
	for i, r := range results(t, props) {
		if !errors.Is(r.err, ErrClosed) {
			t.Fatalf("pending proposal %d: err = %v, want ErrClosed", i, r.err)
		}
	}
	if _, err := b.pr.submit(context.Background(), enqueue(raftfsm.SystemTenant, "late")); !errors.Is(err, ErrClosed) {
		t.Fatalf("submit after close: %v, want ErrClosed", err)
	}
	if got := b.stub.entrySizes(); len(got) != 0 {
		t.Fatalf("entries = %v, want none", got)
	}
}

// Every entry the proposer hands to raft is recorded in OwnEntries (the
// stub's FSM takes each one it applies) and dropped once its proposers
// have their answer, applied or failed: the set holds only the entries in
// flight (raftfsm/own.go).
func TestProposer_OwnEntriesHoldOnlyEntriesInFlight(t *testing.T) {
	t.Parallel()
	for _, failErr := range []error{nil, raft.ErrNotLeader} {
		own := &raftfsm.OwnEntries{}
		b := setupProposerOpts(t, 4, DefaultMaxEntryBytes, failErr, raftfsm.Options{OwnEntries: own})
		b.pr.own = own
		props := b.queue(t, "t", 10)
		b.start()
		for i, r := range results(t, props) {
			if (r.err != nil) != (failErr != nil) {
				t.Fatalf("fail %v: proposal %d: %v", failErr, i, r.err)
			}
		}
		// NB: settle drops a failed entry just after its answers: wait for
		// the last.
		waitFor(t, "no entry recorded after every answer", func() bool { return own.Len() == 0 })
		sizes := b.stub.entrySizes()
		if len(sizes) < 3 {
			t.Fatalf("fail %v: %d entries, want at least 3 (10 commands, 4 per entry)", failErr, len(sizes))
		}
		want := uint64(len(sizes)) // applied: each taken from the very buffer proposed
		if failErr != nil {
			want = 0 // failed: none applied
		}
		if got := own.Taken(); got != want {
			t.Fatalf("fail %v: the FSM took %d of %d entries from OwnEntries, want %d", failErr, got, len(sizes), want)
		}
	}
}

// nodeInfos are SetNodeInfo commands for nodes prefix-0 … prefix-(n-1).
func nodeInfos(prefix string, n int) []*pb.Command {
	cmds := make([]*pb.Command, n)
	for i := range cmds {
		id := fmt.Sprintf("%s-%d", prefix, i)
		cmds[i] = &pb.Command{Op: &pb.Command_SetNodeInfo{SetNodeInfo: &pb.SetNodeInfo{NodeId: id, ApiUrl: "http://" + id}}}
	}
	return cmds
}

// TestProposer_GroupIsNotSplit: commands submitted together (submitAll,
// ProposeAll's path) share one entry: a group that does not fit the entry
// being formed starts the next one whole, instead of filling the entry
// and spilling its last command (an enqueue and the leases it grants,
// server grantLeases); a group larger than an entry goes as single
// proposals. Everyone is answered.
func TestProposer_GroupIsNotSplit(t *testing.T) {
	t.Parallel()
	b := setupProposer(t, 4, nil)
	props := b.queue(t, "single", 2)
	group, err := b.pr.submitAll(context.Background(), nodeInfos("group", 3))
	if err != nil {
		t.Fatal(err)
	}
	big, err := b.pr.submitAll(context.Background(), nodeInfos("big", 5))
	if err != nil {
		t.Fatal(err)
	}
	b.start()
	all := append(append(props, group...), big...)
	for i, r := range results(t, all) {
		if r.err != nil || r.resp.Err != nil {
			t.Fatalf("proposal %d: %v %v", i, r.err, r.resp.Err)
		}
	}
	// The 2 singles (2 + 3 > 4: the group waits); the group and the first
	// of the 5 singles; the other 4. Splitting the group made [4 4 2].
	if got := b.stub.entrySizes(); !slices.Equal(got, []int{2, 4, 4}) {
		t.Fatalf("entries = %v, want [2 4 4]", got)
	}
}

// TestProposer_ClosedFailsPendingGroups: a closing proposer answers every
// member of a queued group and of a carried one with ErrClosed.
func TestProposer_ClosedFailsPendingGroups(t *testing.T) {
	t.Parallel()
	b := setupProposer(t, 4, nil)
	queued, err := b.pr.submitAll(context.Background(), nodeInfos("queued", 3))
	if err != nil {
		t.Fatal(err)
	}
	carried := newProposal(nodeInfos("carried", 1)[0])
	carried.rest = []*proposal{newProposal(nodeInfos("carried-rest", 1)[0])}
	b.pr.carry = carried
	b.pr.failPending()
	for i, r := range results(t, append(queued, carried.group(nil)...)) {
		if !errors.Is(r.err, ErrClosed) {
			t.Fatalf("pending proposal %d: err = %v, want ErrClosed", i, r.err)
		}
	}
	if b.pr.carry != nil {
		t.Fatal("the carried group is still held after failPending")
	}
}

// TestProposer_QueuedAfterLastDrainIsAnswered: a proposal whose sender
// passed the closed check before Close and queues it after the loop's
// last drain (failPending) is still answered, ErrClosed. Unanswered, it
// hung a caller without cancellation (server grantLeases proposes the
// leases of claimed Acquires so, and those Acquires wait for them).
func TestProposer_QueuedAfterLastDrainIsAnswered(t *testing.T) {
	t.Parallel()
	b := setupProposer(t, 64, nil)
	ctx, cancel := context.WithCancel(context.Background())
	b.pr.closed = ctx.Done()
	cancel()
	b.pr.failPending() // the loop's last drain
	// NB: with the queue's room and Close both ready, the select picks
	// either; 64 tries leave each path taken with near certainty.
	for i, cmd := range nodeInfos("late", 64) {
		p, err := b.pr.enqueue(context.Background(), newProposal(cmd))
		if err != nil {
			if !errors.Is(err, ErrClosed) {
				t.Fatalf("proposal %d: %v, want ErrClosed", i, err)
			}
			continue
		}
		select {
		case r := <-p.done:
			if !errors.Is(r.err, ErrClosed) {
				t.Fatalf("proposal %d: answered %v, want ErrClosed", i, r.err)
			}
		default:
			t.Fatalf("proposal %d, queued after the last drain, is never answered", i)
		}
	}
}

// TestProposer_SubmitAllPartlyQueuedIsUnknown: a call too large to go as
// one group that fails after some of its commands were queued fails
// ErrOutcomeUnknown (they may still be applied: here they are), not with
// the plain error that says nothing was.
func TestProposer_SubmitAllPartlyQueuedIsUnknown(t *testing.T) {
	t.Parallel()
	b := setupProposer(t, 4, nil) // not started: the queue fills up
	ctx, cancel := context.WithCancel(context.Background())
	full := make(chan struct{})
	go func() {
		defer close(full)
		for len(b.pr.proposals) < cap(b.pr.proposals) {
			runtime.Gosched()
		}
		cancel()
	}()
	sent, err := b.pr.submitAll(ctx, nodeInfos("many", cap(b.pr.proposals)+4))
	<-full
	if !errors.Is(err, context.Canceled) || !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("submitAll = %v, want canceled and outcome unknown", err)
	}
	if len(sent) != cap(b.pr.proposals) {
		t.Fatalf("%d proposals queued, want %d", len(sent), cap(b.pr.proposals))
	}
	b.start()
	for i, r := range results(t, sent) {
		if r.err != nil || r.resp.Err != nil {
			t.Fatalf("queued proposal %d: %v %v", i, r.err, r.resp.Err)
		}
	}
}
