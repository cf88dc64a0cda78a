package server

import (
	"context"
	"crypto/rand"
	"errors"
	"time"

	"connectrpc.com/connect"

	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/gen/termivar/v1/termivarv1connect"
	"github.com/termivar/distributed/internal/audit"
	"github.com/termivar/distributed/internal/backup"
	"github.com/termivar/distributed/raftfsm"
)

// BackupChunkBytes is the size of one Cluster.Backup message.
const BackupChunkBytes = 1 << 20

// Backup streams a backup file of the whole state (system-tenant admins
// only; a follower forwards the call, so it runs on the leader). The
// state is taken after a linearizable read barrier, at one applied index
// (raftfsm.FSM.ExportAt), so it holds every write acknowledged before the
// call began. Audited: the file holds every tenant's tasks and key hashes.
func (h clusterHandler) Backup(ctx context.Context, req *connect.Request[pb.BackupRequest], stream *connect.ServerStream[pb.BackupChunk]) error {
	p, err := principalFrom(ctx)
	if err == nil {
		err = h.backup(ctx, p, stream)
	}
	h.s.audit.Record(ctx, audit.Entry{KeyID: p.KeyID, Tenant: p.Tenant, Method: "Cluster.Backup", Outcome: kindOf(err)})
	if err != nil {
		return h.s.withLeaderHint(toConnect(err))
	}
	return nil
}

func (h clusterHandler) backup(ctx context.Context, p principal, stream *connect.ServerStream[pb.BackupChunk]) error {
	if !p.systemAdmin() {
		return errDenied("only an admin key of the system tenant may back up the cluster")
	}
	if err := h.s.readBarrier(ctx, p, termivarv1connect.ClusterBackupProcedure); err != nil {
		return err
	}
	id, err := h.recordBackup(ctx)
	if err != nil {
		return err
	}
	st, err := h.s.node.Reads().ExportAt()
	if err != nil {
		return err
	}
	if st.Epoch == nil {
		return errors.New("the cluster has no epoch yet")
	}
	file, err := backup.Encode(&pb.BackupHeader{
		EpochId: st.Epoch, AppliedIndex: st.Index, StateVersion: raftfsm.StateVersion,
		NodeId: h.s.node.NodeID(), CreatedUnixSecs: time.Now().Unix(), LogicalTime: st.LastTime,
		ClusterVersion: h.s.node.Reads().ClusterVersion(), BackupId: id,
	}, st.State)
	if err != nil {
		return err
	}
	for len(file) > 0 {
		n := min(len(file), BackupChunkBytes)
		if err := stream.Send(&pb.BackupChunk{Data: file[:n]}); err != nil {
			return err
		}
		file = file[n:]
	}
	h.s.log.Info("backup streamed", "index", st.Index, "bytes", len(st.State))
	return nil
}

// recordBackup proposes RecordBackup (so Status shows the last backup and
// the backup holds its own record) and returns its random ID; while the
// cluster version is below the operation's, it records nothing and
// returns no ID: backups work during a rolling upgrade.
func (h clusterHandler) recordBackup(ctx context.Context) ([]byte, error) {
	cmd := &pb.Command{Op: &pb.Command_RecordBackup{RecordBackup: &pb.RecordBackup{NodeId: h.s.node.NodeID()}}}
	if raftfsm.CheckClusterVersion(cmd, h.s.node.Reads().ClusterVersion()) != nil {
		return nil, nil
	}
	id := make([]byte, raftfsm.BackupIDBytes)
	if _, err := rand.Read(id); err != nil {
		return nil, err
	}
	cmd.GetRecordBackup().BackupId = id
	r, err := h.s.node.Propose(ctx, cmd)
	if err != nil {
		return nil, err
	}
	if errors.Is(r.Err, raftfsm.ErrClusterVersion) {
		return nil, nil
	}
	return id, r.Err
}
