package clienttest

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
	"github.com/termivar/distributed/server"
)

// backend is the in-memory server.Backend: one FSM, always the leader,
// with an in-process proposer in place of raft. Each proposal is stamped
// with the clock, framed as a log entry (raftfsm.MarshalEntry) and applied
// at once by FSM.Apply, one at a time like raft's apply goroutine, so the
// FSM sees exactly what it sees under a node. Test-only: nothing is
// durable.
type backend struct {
	fsm    *raftfsm.FSM
	codec  *token.Codec
	secret []byte
	limits distributed.Limits
	rl     distributed.ResultLimits

	wake     notify.Queue    // the FSM's WakeFunc: Acquire long-polls
	progress notify.Notifier // the FSM's ProgressFunc

	mu       sync.Mutex // held across stamp and apply (one proposal at a time)
	index    uint64     // the last entry's index
	offset   uint64     // seconds added to the clock by advance
	renewals int        // RenewLease commands that succeeded
}

var _ server.Backend = (*backend)(nil)

// newBackend returns a backend whose FSM holds an initialised cluster and
// the system tenant with these limits, as a node's bootstrap leaves it.
func newBackend(lim distributed.Limits, rl distributed.ResultLimits) (*backend, error) {
	b := &backend{limits: lim, rl: rl, secret: make([]byte, 32)}
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
			return nil, fmt.Errorf("clienttest: bootstrap: %w", err)
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
func (b *backend) Propose(ctx context.Context, cmd *pb.Command) (raftfsm.Response, error) {
	if err := ctx.Err(); err != nil {
		return raftfsm.Response{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.applyLocked(cmd)
}

// ProposeAll applies cmds in order, one entry each.
func (b *backend) ProposeAll(ctx context.Context, cmds []*pb.Command) ([]raftfsm.Response, error) {
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
func (b *backend) applyLocked(cmd *pb.Command) (raftfsm.Response, error) {
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
		return raftfsm.Response{}, fmt.Errorf("clienttest: apply answered a %T", out)
	}
	if r.Err == nil && cmd.GetRenewLease() != nil {
		b.renewals++
	}
	return r, nil
}

// nowLocked is the proposal time in Unix seconds plus the advanced offset;
// callers hold mu.
func (b *backend) nowLocked() uint64 {
	return max(b.fsm.LastTime(), uint64(max(time.Now().Unix(), 0))+b.offset)
}

// advance moves the clock forward by d, in whole seconds.
func (b *backend) advance(d time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.offset += uint64(d / time.Second)
}

func (b *backend) renewalCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.renewals
}

// tick runs one round of background recovery, as the leader's ticker does
// (node.Node.Tick): only the commands that would do something.
func (b *backend) tick() {
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
func (b *backend) Acquirers() *notify.Queue { return &b.wake }

// ProgressChan returns the channel the FSM's next ProgressFunc call for
// tenant closes (tasks may have become terminal).
func (b *backend) ProgressChan(tenant string) <-chan struct{} { return b.progress.Wait(tenant) }

func (b *backend) Reads() raftfsm.Reader { return b.fsm.Reader() }
func (b *backend) Codec() *token.Codec   { return b.codec }
func (b *backend) DefaultLimits() (distributed.Limits, distributed.ResultLimits) {
	return b.limits, b.rl
}
func (b *backend) DefaultScheduling() distributed.SchedulingOptions {
	return distributed.SchedulingOptions{}
}
func (b *backend) NodeID() string                         { return "clienttest" }
func (b *backend) Secret() []byte                         { return append([]byte(nil), b.secret...) }
func (b *backend) IsLeader() bool                         { return true }
func (b *backend) LeaderAPIURL() string                   { return "" }
func (b *backend) Leader() (addr, id string)              { return "", b.NodeID() }
func (b *backend) RaftState() string                      { return "Leader" }
func (b *backend) LinearizableRead(context.Context) error { return nil }
func (b *backend) CommitHealth() error                    { return nil }
