// Tests of versioned commands and states (version.go). Goal: every
// operation has a cluster version; an operation above the cluster version
// is refused with cluster_version and changes nothing; the cluster version
// rises only when every recorded node supports it and never falls; a
// binary that meets an entry or a state it does not understand (an
// unknown operation, a newer encoding, an operation or cluster version
// above its own) stops without applying it, naming the entry and saying
// to upgrade, while a binary that knows the entry answers it
// deterministically; snapshots carry the cluster version and the last
// backup. Method: ApplyCommand and Apply on hand-built entries, comparing
// ExportState before and after.
package raftfsm

import (
	"bytes"
	"crypto/rand"
	"errors"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// opVersions lists every operation of Command.op with the cluster version
// that introduced it. A new operation fails TestVersion_EveryOpHasAVersion
// until it is listed here and in OpVersion.
var opVersions = map[string]uint32{
	"batch": 1, "init_cluster": 1, "create_tenant": 1, "create_key": 1, "enqueue": 1, "register_worker": 1,
	"update_worker": 1, "deregister_worker": 1, "prune_dead_workers": 1, "reactivate_worker": 1,
	"assign_next_available": 1, "assign_next": 1, "assign_task": 1, "start_task": 1, "complete_task": 1,
	"fail_task": 1, "cancel_task": 1, "renew_lease": 1, "recover_expired_leases": 1, "expire_old_tasks": 1,
	"acquire_tasks": 1, "cancel_task_by_id": 1, "revoke_key": 1, "rotate_key": 1, "set_node_info": 1,
	"set_cluster_version": 1, "record_backup": 2, "purge_tasks": 2, "update_tenant": 2, "rerun_tasks": 2,
}

func TestVersion_EveryOpHasAVersion(t *testing.T) {
	od := (&pb.Command{}).ProtoReflect().Descriptor().Oneofs().ByName("op")
	seen := map[string]bool{}
	for i := range od.Fields().Len() {
		fd := od.Fields().Get(i)
		c := &pb.Command{}
		c.ProtoReflect().Set(fd, c.ProtoReflect().NewField(fd))
		name := string(fd.Name())
		seen[name] = true
		want, ok := opVersions[name]
		if !ok {
			t.Errorf("operation %s has no cluster version in opVersions (and OpVersion)", name)
			continue
		}
		if got := OpVersion(c); got != want || got > SupportedVersion {
			t.Errorf("OpVersion(%s) = %d, want %d (≤ SupportedVersion %d)", name, got, want, SupportedVersion)
		}
	}
	for name := range opVersions {
		if !seen[name] {
			t.Errorf("opVersions lists %s, which Command.op lacks", name)
		}
	}
	// Fields of old operations that an older binary would ignore.
	for _, tc := range fieldVersions {
		if got := OpVersion(tc.cmd); got != tc.want {
			t.Errorf("OpVersion(%s) = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// fieldVersions lists fields of version-1 operations that an older binary
// would ignore (and so apply differently), with the cluster version that
// introduced them, beside the same operations without them.
var fieldVersions = []struct {
	name string
	cmd  *pb.Command
	want uint32
}{
	{"create_tenant", &pb.Command{Op: &pb.Command_CreateTenant{CreateTenant: &pb.CreateTenant{Name: "t"}}}, 1},
	{"create_tenant with result_retention_secs", &pb.Command{Op: &pb.Command_CreateTenant{CreateTenant: &pb.CreateTenant{Name: "t", ResultRetentionSecs: 60}}}, 2},
	{"fail_task", &pb.Command{Op: &pb.Command_FailTask{FailTask: &pb.FailTask{}}}, 1},
	{"fail_task with reason", &pb.Command{Op: &pb.Command_FailTask{FailTask: &pb.FailTask{Reason: "exit status 2"}}}, 2},
	{"enqueue", &pb.Command{Op: &pb.Command_Enqueue{Enqueue: &pb.EnqueueTasks{Tasks: []*pb.TaskSpec{{TaskId: "a"}}}}}, 1},
	{"enqueue with attempt_timeout_secs", &pb.Command{Op: &pb.Command_Enqueue{Enqueue: &pb.EnqueueTasks{Tasks: []*pb.TaskSpec{{TaskId: "a"}, {TaskId: "b", AttemptTimeoutSecs: 40}}}}}, 2},
	{"enqueue with declared_total", &pb.Command{Op: &pb.Command_Enqueue{Enqueue: &pb.EnqueueTasks{Tasks: []*pb.TaskSpec{{TaskId: "a"}}, DeclaredTotal: 9}}}, 2},
	{"enqueue declaring a scan's total only", &pb.Command{Op: &pb.Command_Enqueue{Enqueue: &pb.EnqueueTasks{DeclareScanId: "s", DeclaredTotal: 9}}}, 2},
}

func backupCmd(t *testing.T) *pb.Command {
	t.Helper()
	id := make([]byte, BackupIDBytes)
	if _, err := rand.Read(id); err != nil {
		t.Fatal(err)
	}
	return &pb.Command{Op: &pb.Command_RecordBackup{RecordBackup: &pb.RecordBackup{BackupId: id, NodeId: "n1"}}}
}

func versionCmd(v uint32) *pb.Command {
	return &pb.Command{Op: &pb.Command_SetClusterVersion{SetClusterVersion: &pb.SetClusterVersion{Version: v}}}
}

func nodeInfoCmd(id string, v uint32) *pb.Command {
	return &pb.Command{Op: &pb.Command_SetNodeInfo{SetNodeInfo: &pb.SetNodeInfo{NodeId: id, ApiUrl: "http://" + id + ":7420", MaxVersion: v}}}
}

// refusedUnchanged applies cmd and fails unless it is refused with want
// and leaves the whole state byte for byte as it was.
func refusedUnchanged(t *testing.T, b *testBundle, cmd *pb.Command, want error) {
	t.Helper()
	before, _ := b.f.ExportState()
	r := b.apply(cmd)
	if !errors.Is(r.Err, want) {
		t.Fatalf("%s = %v, want %v", opName(cmd), r.Err, want)
	}
	if after, _ := b.f.ExportState(); !bytes.Equal(before, after) {
		t.Fatalf("refused %s changed the state", opName(cmd))
	}
}

// setupV1 is setup at cluster version 1 (setup raises it to the newest).
func setupV1(t *testing.T) *testBundle {
	t.Helper()
	b := setup(t)
	st, _ := b.f.ExportState()
	var fs pb.FSMState
	if err := proto.Unmarshal(st, &fs); err != nil {
		t.Fatal(err)
	}
	fs.ClusterVersion = 1
	v1, _ := proto.MarshalOptions{Deterministic: true}.Marshal(&fs)
	if err := b.f.RestoreState(v1); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestFSM_ClusterVersionGates(t *testing.T) {
	t.Parallel()
	b := setupV1(t)
	if v := b.f.ClusterVersion(); v != MinClusterVersion {
		t.Fatalf("new cluster version = %d, want %d", v, MinClusterVersion)
	}
	// At cluster version 1 the version-2 operation is refused.
	refusedUnchanged(t, b, backupCmd(t), ErrClusterVersion)
	// A node that supports only 1 holds the cluster at 1; one that never
	// reported counts as 1.
	b.must(t, nodeInfoCmd("n1", 2))
	b.must(t, nodeInfoCmd("n2", 1))
	refusedUnchanged(t, b, versionCmd(2), ErrClusterVersion)
	b.must(t, nodeInfoCmd("n3", 0))
	b.must(t, nodeInfoCmd("n2", 2))
	refusedUnchanged(t, b, versionCmd(2), ErrClusterVersion)
	b.must(t, nodeInfoCmd("n3", 2))
	b.must(t, versionCmd(2))
	if v := b.f.ClusterVersion(); v != 2 {
		t.Fatalf("cluster version = %d after SetClusterVersion(2)", v)
	}
	// Never down; the same version again is a no-op.
	refusedUnchanged(t, b, versionCmd(1), ErrInvalidCommand)
	b.must(t, versionCmd(2))
	// Now the operation works, and bad input is refused unchanged.
	cmd := backupCmd(t)
	b.must(t, cmd)
	lb, ok := b.f.LastBackup()
	if !ok || !bytes.Equal(lb.GetBackupId(), cmd.GetRecordBackup().GetBackupId()) || lb.GetLogicalSecs() != b.now {
		t.Fatalf("LastBackup = %v, %v", lb, ok)
	}
	short := backupCmd(t)
	short.GetRecordBackup().BackupId = short.GetRecordBackup().GetBackupId()[:8]
	refusedUnchanged(t, b, short, ErrInvalidCommand)
}

// entry frames cmd (or raw payload bytes) as a committed log entry.
func entry(t *testing.T, index uint64, cmd *pb.Command, extra []byte) *raft.Log {
	t.Helper()
	cmd.Version = max(cmd.Version, CommandVersion)
	p, err := proto.MarshalOptions{Deterministic: true}.Marshal(cmd)
	if err != nil {
		t.Fatal(err)
	}
	return &raft.Log{Index: index, Type: raft.LogCommand, Data: FrameEntry(append(p, extra...))}
}

func TestFSM_UnsupportedEntryStops(t *testing.T) {
	t.Parallel()
	unknownOp := protowire.AppendTag(nil, 63, protowire.VarintType)
	unknownOp = protowire.AppendVarint(unknownOp, 1)
	for _, tc := range []struct {
		name       string
		maxVersion uint32
		cmd        *pb.Command
		extra      []byte
		want       string
	}{
		{"operation above the binary's version", 1, backupCmd(t), nil, "record_backup of cluster version 2"},
		{"inside a batch", 1, &pb.Command{Op: &pb.Command_Batch{Batch: &pb.Batch{Commands: []*pb.Command{{Version: 1, Tenant: "acme", Op: &pb.Command_PruneDeadWorkers{PruneDeadWorkers: &pb.PruneDeadWorkers{}}}, backupCmd(t)}}}}, nil, "record_backup"},
		{"cluster version above the binary's", 1, versionCmd(2), nil, "cluster version 2"},
		{"cluster version above the newest", SupportedVersion, versionCmd(SupportedVersion + 1), nil, "cluster version"},
		{"unknown operation", SupportedVersion, &pb.Command{}, unknownOp, "unknown field 63"},
		{"newer encoding", SupportedVersion, &pb.Command{Version: CommandVersion + 1, Op: &pb.Command_PruneDeadWorkers{PruneDeadWorkers: &pb.PruneDeadWorkers{}}}, nil, "command encoding version 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := setupV1(t)
			b.f.maxVersion = tc.maxVersion
			var fatal error
			b.f.opts.FatalFunc = func(err error) { fatal = err }
			before, _ := b.f.ExportState()
			idx := b.f.AppliedIndex()
			r := b.f.Apply(entry(t, 50, tc.cmd, tc.extra)).(Response)
			if !errors.Is(r.Err, ErrUnsupportedVersion) || errors.Is(r.Err, ErrCorruptEntry) || fatal == nil {
				t.Fatalf("Apply = %v (FatalFunc %v), want ErrUnsupportedVersion", r.Err, fatal)
			}
			for _, s := range []string{"log entry 50", tc.want, "upgrade this node"} {
				if !strings.Contains(r.Err.Error(), s) {
					t.Errorf("error %q does not say %q", r.Err, s)
				}
			}
			if after, _ := b.f.ExportState(); !bytes.Equal(before, after) || b.f.AppliedIndex() != idx {
				t.Error("the entry changed the state or the applied index")
			}
			next := b.f.Apply(entry(t, 51, &pb.Command{Tenant: "acme", Op: &pb.Command_PruneDeadWorkers{PruneDeadWorkers: &pb.PruneDeadWorkers{}}}, nil)).(Response)
			if !errors.Is(next.Err, ErrUnsupportedVersion) {
				t.Errorf("the entry after = %v, want the same stop", next.Err)
			}
			if _, err := b.f.Snapshot(); err == nil {
				t.Error("Snapshot after the stop succeeded")
			}
		})
	}
	// Control: a binary that knows the operation answers it (refused, the
	// same way on every such replica) and goes on.
	b := setupV1(t)
	r := b.f.Apply(entry(t, 50, backupCmd(t), nil)).(Response)
	if !errors.Is(r.Err, ErrClusterVersion) || b.f.Fatal() != nil {
		t.Fatalf("Apply on a binary that knows record_backup = %v (fatal %v), want cluster_version", r.Err, b.f.Fatal())
	}
}

func TestFSM_SnapshotCarriesClusterVersion(t *testing.T) {
	t.Parallel()
	b := setupV1(t)
	b.must(t, nodeInfoCmd("n1", 2))
	b.must(t, versionCmd(2))
	b.must(t, backupCmd(t))
	st, err := b.f.ExportState()
	if err != nil {
		t.Fatal(err)
	}
	f := New(Options{})
	if err := f.RestoreState(st); err != nil {
		t.Fatal(err)
	}
	again, _ := f.ExportState()
	lb, ok := f.LastBackup()
	if !bytes.Equal(st, again) || f.ClusterVersion() != 2 || !ok || lb.GetNodeId() != "n1" {
		t.Fatalf("restored: version %d, backup %v, equal %v", f.ClusterVersion(), lb, bytes.Equal(st, again))
	}
	old := New(Options{MaxVersion: 1})
	empty, _ := old.ExportState()
	if err := old.RestoreState(st); !errors.Is(err, ErrUnsupportedVersion) || !strings.Contains(err.Error(), "upgrade") {
		t.Fatalf("a version-1 binary restoring a version-2 state: %v, want ErrUnsupportedVersion", err)
	}
	if now, _ := old.ExportState(); !bytes.Equal(now, empty) {
		t.Error("the refused restore changed the state")
	}
	// A state from before versions restores at MinClusterVersion.
	var legacy pb.FSMState
	if err := proto.Unmarshal(st, &legacy); err != nil {
		t.Fatal(err)
	}
	legacy.ClusterVersion, legacy.LastBackup = 0, nil
	lbytes, _ := proto.Marshal(&legacy)
	if err := old.RestoreState(lbytes); err != nil || old.ClusterVersion() != MinClusterVersion {
		t.Fatalf("restore of a state without a version: %v, version %d", err, old.ClusterVersion())
	}
}
