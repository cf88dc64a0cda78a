// Tests written for the fresh mutant set of issue 14 (scripts/mutants.txt,
// "Fresh set"): each names the mutant it kills.
package raftfsm

import (
	"bytes"
	"strings"
	"testing"

	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// TestFresh_NodeIDBound pins MaxNodeIDBytes at its edge: an ID of exactly
// MaxNodeIDBytes is recorded, one byte more is refused and changes nothing.
// Kills fresh/nodeinfo-id-bound-off-by-one (`len(id) > MaxNodeIDBytes+1`).
func TestFresh_NodeIDBound(t *testing.T) {
	t.Parallel()
	b := setup(t)
	set := func(id string) Response {
		return b.apply(&pb.Command{Op: &pb.Command_SetNodeInfo{SetNodeInfo: &pb.SetNodeInfo{NodeId: id, ApiUrl: "http://a:1"}}})
	}
	atLimit := strings.Repeat("n", MaxNodeIDBytes)
	if r := set(atLimit); r.Err != nil {
		t.Fatalf("SetNodeInfo(%d-byte ID) = %v, want nil", MaxNodeIDBytes, r.Err)
	}
	before, _ := b.f.ExportState()
	if r := set(atLimit + "n"); r.Err == nil {
		t.Fatalf("SetNodeInfo(%d-byte ID) = nil error, want a refusal", MaxNodeIDBytes+1)
	}
	if after, _ := b.f.ExportState(); !bytes.Equal(before, after) {
		t.Fatal("a refused SetNodeInfo changed the state")
	}
}

// TestFresh_RestoreRefusesMalformedTables extends the restore refusals of
// mutants_test.go to the node table, the epoch, worker owners and scans: a
// hostile snapshot is refused and leaves the FSM byte-identical. Kills
//   - fresh/restore-accepts-duplicate-node (restoreNodes ignores `dup`),
//   - fresh/snapshot-restore-accepts-short-epoch (epoch length unchecked),
//   - fresh/snapshot-restore-duplicate-owner (duplicate WorkerOwner accepted),
//   - fresh/snapshot-restore-scan-of-other-task (a scan may list tasks of
//     another scan).
func TestFresh_RestoreRefusesMalformedTables(t *testing.T) {
	t.Parallel()
	b := richState(t)
	st, _ := b.f.ExportState()
	for name, mut := range map[string]func(*pb.FSMState){
		"duplicate node":    func(s *pb.FSMState) { s.Nodes = append(s.Nodes, s.Nodes[0]) },
		"node with ftp URL": func(s *pb.FSMState) { s.Nodes[0].ApiUrl = "ftp://a:1" },
		"short epoch":       func(s *pb.FSMState) { s.EpochId = s.EpochId[:15] },
		"long epoch":        func(s *pb.FSMState) { s.EpochId = append(s.EpochId, 0) },
		"duplicate owner": func(s *pb.FSMState) {
			s.Tenants[0].WorkerOwners = append(s.Tenants[0].WorkerOwners, s.Tenants[0].WorkerOwners[0])
		},
		"scan of other task": func(s *pb.FSMState) { s.Tenants[0].Scans[0].ScanId = "elsewhere" },
	} {
		checkRestoreRefused(t, name, st, mut)
	}
}
