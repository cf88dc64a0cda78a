package model

import (
	"fmt"

	distributed "github.com/termivar/distributed"
)

// CheckInvariants audits the model's own state; a failure is a bug in the
// model (or in how a test altered it).
func (m *Model) CheckInvariants() error {
	s := m.Snapshot()
	l := m.limits
	switch {
	case s.TaskRecords > l.MaxTaskRecords:
		return fmt.Errorf("model: %d task records above %d", s.TaskRecords, l.MaxTaskRecords)
	case s.ActiveTasks > l.MaxActiveTasks:
		return fmt.Errorf("model: %d active tasks above %d", s.ActiveTasks, l.MaxActiveTasks)
	case s.QueuedTasks > l.MaxQueuedTasks:
		return fmt.Errorf("model: %d queued tasks above %d", s.QueuedTasks, l.MaxQueuedTasks)
	case s.TaskRecords > l.MaxTerminalTasks:
		return fmt.Errorf("model: %d records break the terminal reservation %d", s.TaskRecords, l.MaxTerminalTasks)
	case s.Workers > l.MaxWorkers:
		return fmt.Errorf("model: %d workers above %d", s.Workers, l.MaxWorkers)
	}
	held := map[string]uint32{}
	ids := map[string]bool{}
	leaseIDs := map[uint64]bool{}
	for _, t := range m.tasks {
		if ids[t.TaskID] {
			return fmt.Errorf("model: duplicate task %s", t.TaskID)
		}
		ids[t.TaskID] = true
		if len(t.History) > distributed.MaxAttemptHistory {
			return fmt.Errorf("model: task %s keeps %d attempt records", t.TaskID, len(t.History))
		}
		if err := m.checkGeneration(t); err != nil {
			return err
		}
		if !t.Status.Terminal() && t.FinishedAt != 0 {
			return fmt.Errorf("model: task %s has a finish time but is %v", t.TaskID, t.Status)
		}
		leased := t.Status == distributed.TaskLeased || t.Status == distributed.TaskRunning
		if leased != t.HasLease {
			return fmt.Errorf("model: task %s status %v has lease %v", t.TaskID, t.Status, t.HasLease)
		}
		if !t.HasLease {
			continue
		}
		if leaseIDs[t.Lease.LeaseID] || t.Lease.LeaseID == 0 || t.Lease.LeaseID > m.lastLeaseID {
			return fmt.Errorf("model: task %s lease ID %d reused or out of range", t.TaskID, t.Lease.LeaseID)
		}
		leaseIDs[t.Lease.LeaseID] = true
		if t.Lease.TaskID != t.TaskID || t.Lease.TaskGeneration != t.TaskGeneration || t.Lease.Attempt != t.Attempt {
			return fmt.Errorf("model: task %s lease does not match the record", t.TaskID)
		}
		wi := m.workerIndex(t.Lease.WorkerID)
		if wi < 0 || m.workers[wi].Status == distributed.WorkerOffline || m.workers[wi].Generation != t.Lease.WorkerGeneration {
			return fmt.Errorf("model: task %s leased to a missing, offline or other-generation worker", t.TaskID)
		}
		held[t.Lease.WorkerID]++
	}
	for _, w := range m.workers {
		if w.CurrentTasks != held[w.WorkerID] {
			return fmt.Errorf("model: worker %s CurrentTasks %d, holds %d leases", w.WorkerID, w.CurrentTasks, held[w.WorkerID])
		}
	}
	return nil
}
