// Package membackend is the in-memory server.Backend of client/clienttest
// and of the server's own per-call tests: one FSM, always the leader, with
// an in-process proposer in place of raft. Each proposal is stamped with
// the clock, framed as a log entry (raftfsm.MarshalEntry) and applied at
// once by FSM.Apply, one at a time like raft's apply goroutine, so the FSM
// sees exactly what it sees under a node. Test-only: nothing is durable.
// It does not import server (whose tests use it); its users assert that
// *Backend implements server.Backend.
package membackend

import (
	"context"
	"crypto/rand"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/internal/notify"
	"github.com/termivar/distributed/internal/token"
	"github.com/termivar/distributed/internal/wire"
	"github.com/termivar/distributed/raftfsm"
)

// Backend is the in-memory backend. Safe for concurrent use.
type Backend struct {
	fsm    *raftfsm.FSM
	codec  *token.Codec
	secret []byte
	id     string
	limits distributed.Limits
	rl     distributed.ResultLimits

	wake     notify.Queue    // the FSM's WakeFunc: Acquire long-polls
	progress notify.Notifier // the FSM's ProgressFunc

	mu       sync.Mutex // held across stamp and apply (one proposal at a time)
	index    uint64     // the last entry's index
	offset   uint64     // seconds added to the clock by Advance
	renewals int        // RenewLease commands that succeeded
}

// New returns a backend named id whose FSM holds an initialised cluster
// and the system tenant with these limits, as a node's bootstrap leaves
// it.
func New(id string, lim distributed.Limits, rl distributed.ResultLimits) (*Backend, error) {
	b := &Backend{id: id, limits: lim, rl: rl, secret: make([]byte, 32)}
	epoch := make([]byte, raftfsm.EpochBytes)
	if _, err := rand.Read(b.secret); err != nil {
		return nil, err
	}
	if _, err := rand.Read(epoch); err != nil {
		return nil, err
	}
	b.fsm = raftfsm.New(raftfsm.Options{WakeFunc: b.wake.Notify, ProgressFunc: b.progress.Notify})
	boot := []*pb.Command{
		{Op: &pb.Command_InitCluster{InitCluster: &pb.InitCluster{EpochId: epoch}}},
		{Op: &pb.Command_CreateTenant{CreateTenant: &pb.CreateTenant{Name: raftfsm.SystemTenant,
			Limits: wire.LimitsToProto(lim), ResultLimits: wire.ResultLimitsToProto(rl)}}},
		// NB: a one-voter cluster raises its version at once (node/version.go).
		{Op: &pb.Command_SetClusterVersion{SetClusterVersion: &pb.SetClusterVersion{Version: raftfsm.SupportedVersion}}},
	}
	for _, cmd := range boot {
		if err := raftfsm.ProposalErr(b.Propose(context.Background(), cmd)); err != nil {
			return nil, fmt.Errorf("membackend: bootstrap: %w", err)
		}
	}
	codec, err := token.NewCodec(b.secret, epoch)
	if err != nil {
		return nil, err
	}
	b.codec = codec
	return b, nil
}

// Propose stamps cmd and applies it through the FSM's log-entry path.
func (b *Backend) Propose(ctx context.Context, cmd *pb.Command) (raftfsm.Response, error) {
	if err := ctx.Err(); err != nil {
		return raftfsm.Response{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.applyLocked(cmd)
}

// ProposeAll applies cmds in order, one entry each.
func (b *Backend) ProposeAll(ctx context.Context, cmds []*pb.Command) ([]raftfsm.Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]raftfsm.Response, len(cmds))
	for i, cmd := range cmds {
		r, err := b.applyLocked(cmd)
		if err != nil {
			return nil, err
		}
		out[i] = r
	}
	return out, nil
}

// applyLocked stamps cmd with the clock (never behind the FSM's time),
// frames it and applies it as the next log entry; callers hold mu.
func (b *Backend) applyLocked(cmd *pb.Command) (raftfsm.Response, error) {
	cmd.Version = raftfsm.CommandVersion
	cmd.NowSecs = b.nowLocked()
	data, err := raftfsm.MarshalEntry(cmd)
	if err != nil {
		return raftfsm.Response{}, err
	}
	b.index++
	out := b.fsm.Apply(&raft.Log{Index: b.index, Term: 1, Type: raft.LogCommand, Data: data})
	r, ok := out.(raftfsm.Response)
	if !ok {
		return raftfsm.Response{}, fmt.Errorf("membackend: apply answered a %T", out)
	}
	if r.Err == nil && cmd.GetRenewLease() != nil {
		b.renewals++
	}
	return r, nil
}

// nowLocked is the proposal time in Unix seconds plus the advanced offset;
// callers hold mu.
func (b *Backend) nowLocked() uint64 {
	return max(b.fsm.LastTime(), uint64(max(time.Now().Unix(), 0))+b.offset)
}

// Advance moves the clock forward by d, in whole seconds.
func (b *Backend) Advance(d time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.offset += uint64(d / time.Second)
}

// Renewals counts the RenewLease commands that succeeded.
func (b *Backend) Renewals() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.renewals
}

// Tick runs one round of background recovery, as the leader's ticker does
// (node.Node.Tick): only the commands that would do something.
func (b *Backend) Tick() {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.nowLocked()
	for _, name := range b.fsm.TenantNames() {
		tv, ok := b.fsm.Tenant(name)
		if !ok {
			continue
		}
		for _, cmd := range tv.RecoveryCommands(now, 0) {
			if _, err := b.applyLocked(cmd); err != nil {
				return
			}
		}
	}
}

// Acquirers is the queue of Acquire long-polls the FSM's WakeFunc wakes.
func (b *Backend) Acquirers() *notify.Queue { return &b.wake }

// ProgressChan returns the channel the FSM's next ProgressFunc call for
// tenant closes (tasks may have become terminal).
func (b *Backend) ProgressChan(tenant string) <-chan struct{} { return b.progress.Wait(tenant) }

func (b *Backend) Reads() raftfsm.Reader { return b.fsm.Reader() }
func (b *Backend) Codec() *token.Codec   { return b.codec }
func (b *Backend) DefaultLimits() (distributed.Limits, distributed.ResultLimits) {
	return b.limits, b.rl
}
func (b *Backend) DefaultScheduling() distributed.SchedulingOptions {
	return distributed.SchedulingOptions{}
}
func (b *Backend) NodeID() string                         { return b.id }
func (b *Backend) Secret() []byte                         { return append([]byte(nil), b.secret...) }
func (b *Backend) IsLeader() bool                         { return true }
func (b *Backend) LeaderAPIURL() string                   { return "" }
func (b *Backend) Leader() (addr, id string)              { return "", b.id }
func (b *Backend) RaftState() string                      { return "Leader" }
func (b *Backend) LinearizableRead(context.Context) error { return nil }
func (b *Backend) CommitHealth() error                    { return nil }
