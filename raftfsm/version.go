package raftfsm

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// Rolling upgrades (docs/node.md, "Versions and rolling upgrades"), as
// etcd does it: every operation of the log belongs to the cluster version
// that introduced it; every member records in the node table the highest
// cluster version its binary supports (SetNodeInfo.max_version); the
// leader raises the replicated cluster version (SetClusterVersion) once
// every member of the configuration supports it; an operation is proposed
// and applied only at or above its version. So a member still on the old
// binary never meets an operation it does not know. If it does anyway (it
// was downgraded, or a damaged peer wrote one), it stops with an error
// naming the entry instead of applying something the others apply
// differently (I-version-1: no replica applies an entry another replica
// would apply differently).

// MinClusterVersion is the version of a new cluster and of a state from
// before versions (every operation up to SetClusterVersion).
const MinClusterVersion = 1

// ErrUnsupportedVersion is wrapped by the errors of a log entry or a state
// that needs a newer binary: upgrade the node (it applied nothing of it).
var ErrUnsupportedVersion = errors.New("raftfsm: needs a newer binary")

// OpVersion returns the cluster version that introduced what cmd uses:
// its operation, or a field that an older binary would ignore (and so
// apply differently). Version 1 is the release before versions; version 2
// adds RecordBackup, PurgeTasks, UpdateTenant, RerunTasks,
// CreateTenant.result_retention_secs, FailTask.reason,
// TaskSpec.attempt_timeout_secs and EnqueueTasks.declared_total (and
// declare_scan_id); version 3 adds scheduling (contract Part F,
// docs/adr/0003-scheduling.md): SetSchedulingOptions, UpdateScan,
// AdvanceTime, CreateSchedule, DeleteSchedule, FireSchedule,
// CreateTenant.scheduling and the scheduling fields of TaskSpec. Every
// Command.op field must be listed in version_test.go's table.
func OpVersion(cmd *pb.Command) uint32 {
	switch op := cmd.GetOp().(type) {
	case *pb.Command_RecordBackup, *pb.Command_PurgeTasks, *pb.Command_UpdateTenant, *pb.Command_RerunTasks:
		return 2
	case *pb.Command_SetSchedulingOptions, *pb.Command_UpdateScan, *pb.Command_AdvanceTime,
		*pb.Command_CreateSchedule, *pb.Command_DeleteSchedule, *pb.Command_FireSchedule:
		return 3
	case *pb.Command_CreateTenant:
		return createTenantVersion(op.CreateTenant)
	case *pb.Command_FailTask:
		if op.FailTask.GetReason() != "" {
			return 2
		}
	case *pb.Command_Enqueue:
		return enqueueVersion(op.Enqueue)
	}
	return MinClusterVersion
}

// createTenantVersion is the version of a CreateTenant: 3 with scheduling
// options, 2 with a result retention.
func createTenantVersion(c *pb.CreateTenant) uint32 {
	switch {
	case c.GetScheduling() != nil:
		return 3
	case c.GetResultRetentionSecs() != 0:
		return 2
	}
	return MinClusterVersion
}

// enqueueVersion is the version of an Enqueue: the highest of what it
// uses — 3 for a task's scheduling field (not-before, delay, required
// tags, backoff); 2 for a declared scan total or declare_scan_id (a
// version-1 binary would ignore it, so its scan would finish before the
// declared total is admitted) or a task's attempt timeout.
func enqueueVersion(e *pb.EnqueueTasks) uint32 {
	v := uint32(MinClusterVersion)
	if e.GetDeclaredTotal() != 0 || e.GetDeclareScanId() != "" {
		v = 2
	}
	for _, t := range e.GetTasks() {
		if t.GetNotBeforeSecs() != 0 || t.GetDelaySecs() != 0 || len(t.GetRequiredTags()) != 0 ||
			t.GetBackoffBaseSecs() != 0 || t.GetBackoffCapSecs() != 0 {
			return 3
		}
		if t.GetAttemptTimeoutSecs() != 0 {
			v = 2
		}
	}
	return v
}

// opName names cmd's operation (its oneof field) for messages.
func opName(cmd *pb.Command) string {
	if fd := cmd.ProtoReflect().WhichOneof(cmd.ProtoReflect().Descriptor().Oneofs().ByName("op")); fd != nil {
		return string(fd.Name())
	}
	return "unknown"
}

// unsupported says why this binary (supporting up to maxVersion) must not
// apply cmd, or "" when it may: a newer encoding, an operation it does not
// know (an unknown field of Command), one it knows but whose version is
// above maxVersion (a release emulated by Options.MaxVersion), or a
// SetClusterVersion above maxVersion. A Batch is checked element by
// element.
func unsupported(cmd *pb.Command, maxVersion uint32) string {
	if cmd.GetVersion() > CommandVersion {
		return fmt.Sprintf("command encoding version %d (this binary reads %d)", cmd.GetVersion(), CommandVersion)
	}
	if cmd.GetOp() == nil && len(cmd.ProtoReflect().GetUnknown()) > 0 {
		return fmt.Sprintf("an operation this binary does not know (unknown field %d of Command)", firstUnknownField(cmd.ProtoReflect().GetUnknown()))
	}
	if v := OpVersion(cmd); v > maxVersion {
		return fmt.Sprintf("operation %s of cluster version %d (this binary supports up to %d)", opName(cmd), v, maxVersion)
	}
	if v := cmd.GetSetClusterVersion().GetVersion(); v > maxVersion {
		return fmt.Sprintf("cluster version %d (this binary supports up to %d)", v, maxVersion)
	}
	for _, c := range cmd.GetBatch().GetCommands() {
		if r := unsupported(c, maxVersion); r != "" {
			return r
		}
	}
	return ""
}

// firstUnknownField returns the field number of the first unknown field.
func firstUnknownField(b protoreflect.RawFields) int32 {
	var n uint64
	for i, c := range b {
		n |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 || i == 9 {
			break
		}
	}
	return int32(n >> 3)
}

// ClusterVersion returns the replicated cluster version; it takes no lock.
func (f *FSM) ClusterVersion() uint32 { return f.clusterVersion.Load() }

// MaxVersion returns the highest cluster version this FSM applies
// (Options.MaxVersion, default SupportedVersion).
func (f *FSM) MaxVersion() uint32 { return f.maxVersion }

// NodeVersion returns the highest cluster version a node reported (0: it
// reported none).
func (f *FSM) NodeVersion(id string) uint32 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.nodes[id].version
}

// LastBackup returns the last RecordBackup applied, if any.
func (f *FSM) LastBackup() (*pb.BackupRecord, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.lastBackup == nil {
		return nil, false
	}
	return &pb.BackupRecord{BackupId: f.lastBackup.GetBackupId(), NodeId: f.lastBackup.GetNodeId(), LogicalSecs: f.lastBackup.GetLogicalSecs()}, true
}

// ClusterVersion returns the replicated cluster version.
func (r Reader) ClusterVersion() uint32 { return r.f.ClusterVersion() }

// MaxVersion returns the highest cluster version this node's FSM applies.
func (r Reader) MaxVersion() uint32 { return r.f.MaxVersion() }

// LastBackup returns the last recorded backup, if any.
func (r Reader) LastBackup() (*pb.BackupRecord, bool) { return r.f.LastBackup() }

// checkClusterVersion refuses cmd while the cluster version is below its
// operation's (caller holds f.mu).
func (f *FSM) checkClusterVersion(cmd *pb.Command) error {
	return CheckClusterVersion(cmd, f.clusterVersion.Load())
}

// CheckClusterVersion returns an *Error of KindClusterVersion (errors.Is
// ErrClusterVersion) when cmd's operation needs a cluster version above
// clusterVersion; proposers call it before proposing (node.Node.Propose).
func CheckClusterVersion(cmd *pb.Command, clusterVersion uint32) error {
	if v := OpVersion(cmd); v > clusterVersion {
		return fsmErr(KindClusterVersion, fmt.Sprintf("%s needs cluster version %d; the cluster runs %d until every member is upgraded", opName(cmd), v, clusterVersion))
	}
	return nil
}

// applySetClusterVersion raises the cluster version: never down, never
// above what a recorded node supports (a node that reported nothing
// supports MinClusterVersion). The raise that first reaches version 3
// applies its system_scheduling to the system tenant (schedulingVersion).
func (f *FSM) applySetClusterVersion(m *pb.SetClusterVersion, now uint64) Response {
	v := m.GetVersion()
	if v < MinClusterVersion || v < f.clusterVersion.Load() {
		return Response{Err: fsmErr(KindInvalidCommand, "the cluster version never decreases")}
	}
	if m.GetSystemScheduling() != nil && v < schedulingVersion {
		return Response{Err: fsmErr(KindInvalidCommand, "system_scheduling needs cluster version 3")}
	}
	for _, id := range sortedKeys(f.nodes) {
		if nv := max(f.nodes[id].version, MinClusterVersion); nv < v {
			return Response{Err: fsmErr(KindClusterVersion, fmt.Sprintf("node %s supports cluster version %d only", id, nv))}
		}
	}
	if err := f.upgradeSystemScheduling(m, now); err != nil {
		return Response{Err: err}
	}
	f.clusterVersion.Store(v)
	return Response{}
}

// schedulingVersion is the cluster version of scheduling (contract Part F).
const schedulingVersion = 3

// upgradeSystemScheduling gives the system tenant the raise's
// system_scheduling when the cluster version first reaches
// schedulingVersion (nothing else could have set its options before).
// Invalid options refuse the raise, which changes nothing.
func (f *FSM) upgradeSystemScheduling(m *pb.SetClusterVersion, now uint64) error {
	t, ok := f.tenants[SystemTenant]
	if m.GetSystemScheduling() == nil || f.clusterVersion.Load() >= schedulingVersion || !ok {
		return nil
	}
	o := SchedulingFromProto(m.GetSystemScheduling())
	if err := o.Validate(); err != nil {
		return fsmErr(KindInvalidCommand, "system_scheduling is invalid: "+err.Error())
	}
	_, err := t.pool.SetSchedulingOptions(t.pool.Snapshot().Revision, now, o)
	return err
}

// applyRecordBackup records a backup (cluster version 2).
func (f *FSM) applyRecordBackup(m *pb.RecordBackup, now uint64) Response {
	if len(m.GetBackupId()) != BackupIDBytes || !validNodeInfo(m.GetNodeId(), "") {
		return Response{Err: fsmErr(KindInvalidCommand, "backup record is invalid")}
	}
	f.lastBackup = &pb.BackupRecord{BackupId: m.GetBackupId(), NodeId: m.GetNodeId(), LogicalSecs: now}
	return Response{}
}

// BackupIDBytes is the length of a RecordBackup ID.
const BackupIDBytes = 16
