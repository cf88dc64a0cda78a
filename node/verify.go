package node

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/hashicorp/raft"

	"github.com/termivar/distributed/raftfsm"
)

// ErrDamagedDataDir is returned (wrapped in a *DataDirError) when the data
// directory is damaged: Open refuses to start rather than guess, and a
// running node stops when a committed entry turns out to be corrupt.
var ErrDamagedDataDir = errors.New("node: damaged data dir")

// DataDirError names the damaged file, what is wrong with it and what the
// operator should do. serve prints it as its one error line and exits 2.
type DataDirError struct {
	Path    string
	Problem string
	Remedy  string
}

// Error implements error.
func (e *DataDirError) Error() string {
	return fmt.Sprintf("node: %s %s; %s", e.Path, e.Problem, e.Remedy)
}

// Unwrap makes errors.Is(err, ErrDamagedDataDir) true.
func (e *DataDirError) Unwrap() error { return ErrDamagedDataDir }

func dataDirErr(path, problem, remedy string) error {
	return &DataDirError{Path: path, Problem: problem, Remedy: remedy}
}

// Remedies (docs/node.md, "Repairing a damaged data dir").
const (
	remedyCorruptLog = "to repair: on a cluster member, move this data dir away and re-join the node " +
		"(serve --join) so it copies the log from the others; a single node is restored from a backup " +
		"snapshot (docs/node.md, \"Repairing a damaged data dir\")"
	remedyMissingSnapshot = "restore the raft/snapshots directory from a backup, or on a cluster member " +
		"move this data dir away and re-join the node (serve --join)"
)

// verifyStores runs before raft.NewRaft, which would panic or loop on the
// damage it finds (docs/node.md, "Log integrity"): the log store must hold
// a contiguous run of entries that the newest snapshot reaches (nothing
// missing between them), and every command entry must pass its integrity
// frame. walDir names the files in messages.
func verifyStores(walDir, snapDir string, logs raft.LogStore, stable raft.StableStore, snaps raft.SnapshotStore) error {
	first, err := logs.FirstIndex()
	if err != nil {
		return dataDirErr(walDir, "cannot be read: "+err.Error(), remedyCorruptLog)
	}
	last, err := logs.LastIndex()
	if err != nil {
		return dataDirErr(walDir, "cannot be read: "+err.Error(), remedyCorruptLog)
	}
	metas, err := snaps.List()
	if err != nil {
		return dataDirErr(snapDir, "cannot be listed: "+err.Error(), remedyMissingSnapshot)
	}
	var snapIndex uint64
	if len(metas) > 0 {
		snapIndex = metas[0].Index // List returns the newest first
	}
	if err := checkCoverage(walDir, snapDir, first, last, snapIndex, stable); err != nil {
		return err
	}
	return checkEntriesAfter(walDir, logs, first, last, snapIndex)
}

// checkCoverage checks that the snapshot and the log together hold every
// index from 1 to the end of the log.
func checkCoverage(walDir, snapDir string, first, last, snapIndex uint64, stable raft.StableStore) error {
	if last == 0 && snapIndex == 0 {
		term, err := stable.GetUint64([]byte("CurrentTerm"))
		if err == nil && term > 0 {
			return dataDirErr(walDir, fmt.Sprintf("holds raft state (term %d) but no log entries, and there is no snapshot: "+
				"the log's segment files were deleted", term), remedyCorruptLog)
		}
		return nil
	}
	if last == 0 {
		return nil // everything is in the snapshot (e.g. right after InstallSnapshot)
	}
	if first > 1 && snapIndex+1 < first {
		if snapIndex == 0 {
			return dataDirErr(snapDir, fmt.Sprintf("holds no snapshot, but the log starts at index %d: "+
				"the snapshot that covers indexes 1..%d was deleted", first, first-1), remedyMissingSnapshot)
		}
		return dataDirErr(snapDir, fmt.Sprintf("holds a snapshot up to index %d, but the log starts at index %d: "+
			"indexes %d..%d are missing", snapIndex, first, snapIndex+1, first-1), remedyMissingSnapshot)
	}
	if snapIndex > last {
		return dataDirErr(walDir, fmt.Sprintf("ends at index %d, but the snapshot reaches index %d: "+
			"the log lost its last records (entries %d..%d)", last, snapIndex, last+1, snapIndex), remedyCorruptLog)
	}
	return nil
}

// checkEntries reads every entry from first to last: each must carry its
// own index, terms must not decrease, and command entries must pass their
// integrity frame and decode.
func checkEntries(walDir string, logs raft.LogStore, first, last uint64) error {
	return checkEntriesAfter(walDir, logs, first, last, 0)
}

// checkEntriesAfter is checkEntries, but a command entry at or below
// snapIndex (the newest snapshot's) must pass its frame only, not decode.
// Such an entry is never applied on this node again: raft restores the
// snapshot, which holds its effect, and replays only the entries after it.
// Its CRC-32C still catches storage damage; decoding it would add no
// check of the disk, because a payload whose checksum matches is the
// bytes its proposer marshalled (raftfsm.MarshalEntry), which decode
// (TestDecodeCommand_AgreesWithProto) — and were decoded when some
// member's FSM applied the entry, since the snapshot covers it. The
// decode was most of this check's cost (docs/benchmarks.md, "Restart of a
// 1 M-task node"): with a recent snapshot, the retained log is
// TrailingLogs entries that are all below it.
func checkEntriesAfter(walDir string, logs raft.LogStore, first, last, snapIndex uint64) error {
	var prevTerm uint64
	for i := first; i != 0 && i <= last; i++ {
		var l raft.Log
		if err := logs.GetLog(i, &l); err != nil {
			return dataDirErr(walDir, fmt.Sprintf("cannot read log entry %d: %v", i, err), remedyCorruptLog)
		}
		if l.Index != i {
			return dataDirErr(walDir, fmt.Sprintf("returns index %d where log entry %d belongs (non-monotonic log)", l.Index, i), remedyCorruptLog)
		}
		if l.Term < prevTerm {
			return dataDirErr(walDir, fmt.Sprintf("log entry %d has term %d after term %d", i, l.Term, prevTerm), remedyCorruptLog)
		}
		prevTerm = l.Term
		if l.Type != raft.LogCommand {
			continue
		}
		if err := checkCommand(i, l.Data, i > snapIndex); err != nil {
			return dataDirErr(walDir, err.Error(), remedyCorruptLog)
		}
	}
	return nil
}

// checkCommand checks the frame of the command entry at index, and
// decodes it when decode is set; any failure is a *raftfsm.EntryError.
func checkCommand(index uint64, data []byte, decode bool) error {
	if decode {
		_, err := raftfsm.DecodeEntry(index, data)
		return err
	}
	if _, reason := raftfsm.UnframeEntry(data); reason != "" {
		return &raftfsm.EntryError{Index: index, Reason: reason}
	}
	return nil
}

// verifyDataDir is the whole startup check: the raw segment scan, which
// must run before raft-wal opens (and repairs) the files, is done by
// openRaft; this runs once the stores are open.
func (n *Node) verifyDataDir(logs raft.LogStore, stable raft.StableStore, snaps raft.SnapshotStore) error {
	dir := filepath.Join(n.cfg.DataDir, raftDir)
	return verifyStores(filepath.Join(dir, "wal"), filepath.Join(dir, "snapshots"), logs, stable, snaps)
}
