package sim

import (
	"encoding/binary"
	"hash/crc32"

	distributed "github.com/termivar/distributed"
	"github.com/termivar/distributed/distributedtest/model"
)

// The simulator holds every proof (lease, fence, receipt) as a model value
// with exported fields, so that it can forge and alter them freely. To hand
// one to the core it re-encodes the fields in the core's documented binary
// format (proofs.go, codec.go) — magic | version | uvarints and
// length-prefixed strings | big-endian CRC-32C of everything before it — and
// decodes the bytes with the core's own UnmarshalBinary. The encoder is
// written independently of the core's.

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

type frame struct{ b []byte }

func newFrame(magic string) *frame { return &frame{b: append([]byte(magic), 1)} }

func (f *frame) u(v uint64) { f.b = binary.AppendUvarint(f.b, v) }

func (f *frame) s(v string) {
	f.u(uint64(len(v)))
	f.b = append(f.b, v...)
}

func (f *frame) done() []byte {
	return binary.BigEndian.AppendUint32(f.b, crc32.Checksum(f.b, castagnoli))
}

// EncodeLease returns the core's binary form of l.
func EncodeLease(l model.Lease) []byte {
	f := newFrame("TVL")
	f.s(l.TaskID)
	f.s(l.WorkerID)
	f.u(l.WorkerGeneration)
	f.u(l.TaskGeneration)
	f.u(uint64(l.Attempt))
	f.u(l.LeaseID)
	f.u(l.AcquiredAt)
	f.u(l.ExpiresAt)
	return f.done()
}

// EncodeFence returns the core's binary form of x.
func EncodeFence(x model.Fence) []byte {
	f := newFrame("TVF")
	f.s(x.TaskID)
	f.u(x.TaskGeneration)
	f.u(x.RecordVersion)
	return f.done()
}

// EncodeReceipt returns the core's binary form of r.
func EncodeReceipt(r model.Receipt) []byte {
	f := newFrame("TVR")
	f.s(r.TaskID)
	f.u(r.TaskGeneration)
	f.u(uint64(r.Attempt))
	f.u(r.LeaseID)
	f.s(r.WorkerID)
	f.u(r.WorkerGeneration)
	f.u(r.RecordVersion)
	return f.done()
}

// coreProof decodes the core proof C from v's encoding by enc; the zero
// model value maps to the zero core value.
func coreProof[M comparable, C any, PC interface {
	*C
	UnmarshalBinary([]byte) error
}](v M, enc func(M) []byte) (C, error) {
	var out C
	if v == *new(M) {
		return out, nil
	}
	err := PC(&out).UnmarshalBinary(enc(v))
	return out, err
}

// CoreLease builds the core lease with exactly l's fields. The zero model
// lease maps to the zero core lease.
func CoreLease(l model.Lease) (distributed.TaskLease, error) {
	return coreProof[model.Lease, distributed.TaskLease](l, EncodeLease)
}

// CoreFence builds the core fence with exactly x's fields.
func CoreFence(x model.Fence) (distributed.QueuedTaskFence, error) {
	return coreProof[model.Fence, distributed.QueuedTaskFence](x, EncodeFence)
}

// CoreReceipt builds the core receipt with exactly r's fields.
func CoreReceipt(r model.Receipt) (distributed.CompletionReceipt, error) {
	return coreProof[model.Receipt, distributed.CompletionReceipt](r, EncodeReceipt)
}

// CoreOwnership builds the core ownership for o.
func CoreOwnership(o model.Ownership) (distributed.TaskOwnership, error) {
	if o.IsLease {
		l, err := CoreLease(o.Lease)
		return distributed.OwnershipFromLease(l), err
	}
	f, err := CoreFence(o.Fence)
	return distributed.OwnershipFromFence(f), err
}

// ModelLease reads a core lease's fields.
func ModelLease(l distributed.TaskLease) model.Lease {
	return model.Lease{
		TaskID:           l.TaskID(),
		WorkerID:         l.WorkerID(),
		WorkerGeneration: l.WorkerGeneration(),
		TaskGeneration:   l.TaskGeneration(),
		Attempt:          l.Attempt(),
		LeaseID:          l.LeaseID(),
		AcquiredAt:       l.AcquiredAt(),
		ExpiresAt:        l.ExpiresAt(),
	}
}

// ModelReceipt reads a core receipt's fields.
func ModelReceipt(r distributed.CompletionReceipt) model.Receipt {
	return model.Receipt{
		TaskID:           r.TaskID(),
		TaskGeneration:   r.TaskGeneration(),
		Attempt:          r.Attempt(),
		LeaseID:          r.LeaseID(),
		WorkerID:         r.WorkerID(),
		WorkerGeneration: r.WorkerGeneration(),
		RecordVersion:    r.RecordVersion(),
	}
}

// ModelTask reads the public fields of a core task; the model's bookkeeping
// fields stay zero (see TaskView).
func ModelTask(t distributed.ScanTask) model.Task {
	out := model.Task{
		TaskID:         t.TaskID(),
		ScanID:         t.ScanID(),
		TargetRef:      t.TargetRef(),
		Phases:         t.Phases(),
		Status:         t.Status(),
		Priority:       t.Priority(),
		CreatedAt:      t.CreatedAt(),
		RetryCount:     t.RetryCount(),
		Attempt:        t.Attempt(),
		TaskGeneration: t.TaskGeneration(),
		RecordVersion:  t.RecordVersion(),
		TimeoutSecs:    t.AttemptTimeoutSecs(),
		History:        modelHistory(t.Attempts()),
		Reruns:         t.Reruns(),
	}
	out.StartedAt, out.HasStarted = t.StartedAt()
	out.CompletedAt, out.HasCompleted = t.CompletedAt()
	out.FinishedAt, _ = t.FinishedAt()
	if l, ok := t.Lease(); ok {
		out.Lease, out.HasLease = ModelLease(l), true
	}
	if len(out.Phases) == 0 {
		out.Phases = nil
	}
	return out
}

// TaskView strips the model's bookkeeping so that a model task compares
// equal to ModelTask of the matching core task.
func TaskView(t model.Task) model.Task {
	return model.Task{
		TaskID: t.TaskID, ScanID: t.ScanID, TargetRef: t.TargetRef, Phases: nilIfEmpty(t.Phases),
		Status: t.Status, Priority: t.Priority, CreatedAt: t.CreatedAt,
		StartedAt: t.StartedAt, HasStarted: t.HasStarted, CompletedAt: t.CompletedAt, HasCompleted: t.HasCompleted,
		FinishedAt: t.FinishedAt,
		RetryCount: t.RetryCount, Attempt: t.Attempt, TaskGeneration: t.TaskGeneration, RecordVersion: t.RecordVersion,
		Lease: t.Lease, HasLease: t.HasLease,
		TimeoutSecs: t.TimeoutSecs, History: nilIfNoHistory(t.History), Reruns: t.Reruns,
	}
}

// modelHistory reads a core task's attempt history.
func modelHistory(as []distributed.AttemptRecord) []model.Attempt {
	if len(as) == 0 {
		return nil
	}
	out := make([]model.Attempt, len(as))
	for i, a := range as {
		out[i] = model.Attempt{
			Attempt: a.Attempt(), TaskGeneration: a.TaskGeneration(), WorkerID: a.WorkerID(), LeaseID: a.LeaseID(),
			AcquiredAt: a.AcquiredAt(), EndedAt: a.EndedAt(), Outcome: a.Outcome(), Reason: a.Reason(),
		}
		out[i].StartedAt, out[i].HasStarted = a.StartedAt()
	}
	return out
}

func nilIfNoHistory(h []model.Attempt) []model.Attempt {
	if len(h) == 0 {
		return nil
	}
	return h
}

func nilIfEmpty(b []uint8) []uint8 {
	if len(b) == 0 {
		return nil
	}
	return b
}

// ModelWorker reads a core worker's fields.
func ModelWorker(w distributed.WorkerNode) model.Worker {
	out := model.Worker{
		WorkerID:           w.WorkerID(),
		Generation:         w.Generation(),
		Status:             w.Status(),
		Capacity:           w.Capacity(),
		CurrentTasks:       w.CurrentTasks(),
		CompletedTasks:     w.CompletedTasks(),
		LastHeartbeat:      w.LastHeartbeat(),
		CPUBasisPoints:     w.CPUBasisPoints(),
		MemoryBasisPoints:  w.MemoryBasisPoints(),
		NetworkBasisPoints: w.NetworkBasisPoints(),
		Tags:               w.Tags(),
	}
	if len(out.Tags) == 0 {
		out.Tags = nil
	}
	return out
}

// WorkerView normalizes a model worker for comparison.
func WorkerView(w model.Worker) model.Worker {
	if len(w.Tags) == 0 {
		w.Tags = nil
	}
	return w
}
