package sim

import (
	"fmt"
	"strings"

	distributed "github.com/termivar/distributed"
	"github.com/termivar/distributed/distributedtest/model"
)

// Op names one command (or read, or fault) of the simulator.
type Op uint8

// The simulator's operations: every mutating command of contract Part A, the
// reads, and the restart fault (ExportState → RestoreWorkerPool).
const (
	OpEnqueue Op = iota
	OpEnqueueBatch
	OpRegister
	OpUpdate
	OpDeregister
	OpPrune
	OpReactivate
	OpAssignNextAvailable
	OpAssignNext
	OpAssignTask
	OpStart
	OpComplete
	OpFail
	OpRenew
	OpCancel
	OpCancelByID
	OpRecover
	OpExpire
	OpGetTask
	OpGetWorker
	OpPeek
	OpAvailable
	OpStoreResult
	OpGetResult
	OpAggregate
	OpRestart
	// OpPurge and OpPurgeResults are Part F additions (docs/adr/0002-purge.md).
	OpPurge
	OpPurgeResults
	// OpRerun is RerunTasks (beyond contract Part A).
	OpRerun
	numOps
)

var opNames = [...]string{
	OpEnqueue: "enqueue", OpEnqueueBatch: "enqueue-batch", OpRegister: "register", OpUpdate: "update", OpDeregister: "deregister",
	OpPrune: "prune", OpReactivate: "reactivate", OpAssignNextAvailable: "assign-next-available",
	OpAssignNext: "assign-next", OpAssignTask: "assign-task", OpStart: "start", OpComplete: "complete",
	OpFail: "fail", OpRenew: "renew", OpCancel: "cancel", OpCancelByID: "cancel-by-id", OpRecover: "recover-expired",
	OpExpire: "expire-old", OpGetTask: "get-task", OpGetWorker: "get-worker", OpPeek: "peek",
	OpAvailable: "get-available-worker", OpStoreResult: "store-result", OpGetResult: "get-result",
	OpAggregate: "aggregate", OpRestart: "restart", OpPurge: "purge", OpPurgeResults: "purge-results",
	OpRerun: "rerun",
}

func (o Op) String() string {
	if o < numOps {
		return opNames[o]
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Mutating reports whether the op is a command that takes a revision.
func (o Op) Mutating() bool {
	return o <= OpExpire || o == OpStoreResult || o == OpPurge || o == OpPurgeResults || o == OpRerun
}

// pool reports whether the op addresses the WorkerPool (not the results).
func (o Op) pool() bool { return o <= OpAvailable || o == OpPurge || o == OpRerun }

// Command is one step. RevDelta and NowDelta are relative to the revision
// and logical time when the step is applied (so that a shrunk sequence stays
// meaningful); Rev and Now hold the resolved absolute values once applied.
// With AbsRev/AbsNow the absolute values are used as they are (duplicates
// and reordered deliveries of an earlier command).
type Command struct {
	Op       Op
	RevDelta int64
	NowDelta int64
	AbsRev   bool
	AbsNow   bool
	Rev      uint64
	Now      uint64

	TaskSpec   distributed.TaskSpec
	TaskSpecs  []distributed.TaskSpec
	WorkerSpec distributed.WorkerSpec
	Obs        distributed.WorkerObservation
	TaskID     string
	WorkerID   string
	Generation uint64
	TTL        uint64
	MaxAge     uint64
	Lease      model.Lease
	Own        model.Ownership
	Receipt    model.Receipt
	Data       []byte
	IDs        []string
	Reason     string                   // OpFail: "" calls FailTask, else FailTaskWithReason
	Rerun      distributed.RerunRequest // OpRerun
	Purge      distributed.PurgeFilter  // OpPurge

	// Note says which fault or choice the generator made (for reports).
	Note string
}

func short(s string) string {
	if len(s) > 24 {
		return fmt.Sprintf("%q…(%d bytes)", s[:12], len(s))
	}
	return fmt.Sprintf("%q", s)
}

func leaseString(l model.Lease) string {
	return fmt.Sprintf("lease{task=%s worker=%s wgen=%d tgen=%d attempt=%d id=%d acq=%d exp=%d}",
		short(l.TaskID), short(l.WorkerID), l.WorkerGeneration, l.TaskGeneration, l.Attempt, l.LeaseID, l.AcquiredAt, l.ExpiresAt)
}

// String renders the command on one line (targets are test data, not secrets).
func (c Command) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s rev=%d now=%d", c.Op, c.Rev, c.Now)
	switch c.Op {
	case OpEnqueue:
		s := c.TaskSpec
		fmt.Fprintf(&b, " task=%s scan=%s target=%s phases=%d prio=%d", short(s.TaskID), short(s.ScanID), short(s.TargetRef), len(s.Phases), s.Priority)
	case OpEnqueueBatch:
		for _, s := range c.TaskSpecs {
			fmt.Fprintf(&b, " [task=%s scan=%s prio=%d]", short(s.TaskID), short(s.ScanID), s.Priority)
		}
	case OpRegister, OpReactivate:
		s := c.WorkerSpec
		fmt.Fprintf(&b, " worker=%s cap=%d util=%d/%d/%d tags=%v", short(s.WorkerID), s.Capacity, s.CPUBasisPoints, s.MemoryBasisPoints, s.NetworkBasisPoints, s.Tags)
		if c.Op == OpReactivate {
			fmt.Fprintf(&b, " gen=%d", c.Generation)
		}
	case OpUpdate:
		fmt.Fprintf(&b, " worker=%s gen=%d status=%d util=%d/%d/%d", short(c.WorkerID), c.Generation, c.Obs.Status, c.Obs.CPUBasisPoints, c.Obs.MemoryBasisPoints, c.Obs.NetworkBasisPoints)
	case OpDeregister:
		fmt.Fprintf(&b, " worker=%s gen=%d", short(c.WorkerID), c.Generation)
	case OpAssignNextAvailable:
		fmt.Fprintf(&b, " ttl=%d", c.TTL)
	case OpAssignNext:
		fmt.Fprintf(&b, " worker=%s ttl=%d", short(c.WorkerID), c.TTL)
	case OpAssignTask:
		fmt.Fprintf(&b, " task=%s worker=%s ttl=%d", short(c.TaskID), short(c.WorkerID), c.TTL)
	case OpStart, OpComplete, OpFail:
		b.WriteString(" " + leaseString(c.Lease))
		if c.Reason != "" {
			fmt.Fprintf(&b, " reason=%d bytes", len(c.Reason))
		}
	case OpRerun:
		fmt.Fprintf(&b, " ids=%q statuses=%v", c.Rerun.TaskIDs, c.Rerun.Statuses)
	case OpRenew:
		fmt.Fprintf(&b, " %s ttl=%d", leaseString(c.Lease), c.TTL)
	case OpCancelByID, OpGetTask, OpGetResult:
		fmt.Fprintf(&b, " task=%s", short(c.TaskID))
	case OpCancel:
		if c.Own.IsLease {
			b.WriteString(" " + leaseString(c.Own.Lease))
		} else {
			f := c.Own.Fence
			fmt.Fprintf(&b, " fence{task=%s tgen=%d rv=%d}", short(f.TaskID), f.TaskGeneration, f.RecordVersion)
		}
	case OpExpire:
		fmt.Fprintf(&b, " max_age=%d", c.MaxAge)
	case OpGetWorker:
		fmt.Fprintf(&b, " worker=%s", short(c.WorkerID))
	case OpStoreResult:
		r := c.Receipt
		fmt.Fprintf(&b, " receipt{task=%s tgen=%d attempt=%d lease=%d worker=%s wgen=%d rv=%d} bytes=%d",
			short(r.TaskID), r.TaskGeneration, r.Attempt, r.LeaseID, short(r.WorkerID), r.WorkerGeneration, r.RecordVersion, len(c.Data))
	case OpAggregate, OpPurgeResults:
		fmt.Fprintf(&b, " ids=%q", c.IDs)
	case OpPurge:
		fmt.Fprintf(&b, " scan=%q before=%d ids=%q", c.Purge.ScanID, c.Purge.FinishedBefore, c.Purge.TaskIDs)
	}
	if c.Note != "" {
		fmt.Fprintf(&b, " [%s]", c.Note)
	}
	return b.String()
}
