package model

import (
	"sort"

	distributed "github.com/termivar/distributed"
)

// Purge removes terminal tasks (contract Part F, docs/adr/0002-purge.md):
// the named ones (each must exist and be terminal), or every terminal task
// of f.ScanID ("" any) that finished strictly before f.FinishedBefore (0:
// any time). It returns the purged IDs in task-ID order.
func (m *Model) Purge(rev, now uint64, f distributed.PurgeFilter) ([]string, uint64, error) {
	if err := checkPurgeFilter(f); err != nil {
		return nil, 0, err
	}
	if err := m.begin(rev, now); err != nil {
		return nil, 0, err
	}
	gone := map[string]bool{}
	for _, id := range f.TaskIDs {
		i := m.taskIndex(id)
		if i < 0 {
			return nil, 0, &distributed.Error{Kind: distributed.KindTaskNotFound, TaskID: id}
		}
		if st := m.tasks[i].Status; !st.Terminal() {
			return nil, 0, &distributed.Error{Kind: distributed.KindInvalidTransition, TaskID: id, Status: st, Operation: "purge"}
		}
		gone[id] = true
	}
	if len(f.TaskIDs) == 0 {
		for _, t := range m.tasks {
			if t.Status.Terminal() && (f.ScanID == "" || t.ScanID == f.ScanID) &&
				(f.FinishedBefore == 0 || t.FinishedAt < f.FinishedBefore) {
				gone[t.TaskID] = true
			}
		}
	}
	if err := m.revisionExhausted(); err != nil {
		return nil, 0, err
	}
	kept := m.tasks[:0:0]
	ids := []string{}
	for _, t := range m.tasks {
		if !gone[t.TaskID] {
			kept = append(kept, t)
			continue
		}
		ids = append(ids, t.TaskID)
		if t.TaskGeneration+1 > m.genFloor {
			m.genFloor = t.TaskGeneration + 1
		}
	}
	m.tasks = kept
	sort.Strings(ids)
	return ids, m.commit(now), nil
}

func checkPurgeFilter(f distributed.PurgeFilter) error {
	switch {
	case len(f.TaskIDs) > distributed.MaxPurgeTaskIDs:
		return invalidTask("too many task IDs")
	case len(f.TaskIDs) > 0 && (f.ScanID != "" || f.FinishedBefore != 0):
		return invalidTask("task IDs exclude the scan and time filters")
	case f.ScanID != "" && !distributed.ValidIdentifier(f.ScanID):
		return invalidTask(badTaskCommandID)
	}
	return checkIDList(f.TaskIDs)
}

// checkIDList rejects invalid and repeated IDs, in list order.
func checkIDList(ids []string) error {
	for i, id := range ids {
		if !distributed.ValidIdentifier(id) {
			return invalidTask(badTaskCommandID)
		}
		for _, earlier := range ids[:i] {
			if earlier == id {
				return &distributed.Error{Kind: distributed.KindInvalidTask, TaskID: id, Reason: "task ID is repeated"}
			}
		}
	}
	return nil
}

// purgedProof: a proof whose generation predates the task's current life
// (or, with no task of that ID, the generation floor) is of a purged life.
func (m *Model) purgedProof(ti int, id string, gen uint64) error {
	if (ti < 0 && gen < m.genFloor) || (ti >= 0 && gen < m.tasks[ti].LifeBase) {
		return &distributed.Error{Kind: distributed.KindTaskPurged, TaskID: id}
	}
	return nil
}

// PurgeDue reports whether a terminal task finished strictly before before.
func (m *Model) PurgeDue(before uint64) bool {
	for _, t := range m.tasks {
		if t.Status.Terminal() && t.FinishedAt < before {
			return true
		}
	}
	return false
}

// GenerationFloor returns the generation new tasks start at.
func (m *Model) GenerationFloor() uint64 { return m.genFloor }

// PurgeResults removes the results of ids (those without one are skipped)
// and returns how many it removed; every success is one revision.
func (r *Results) PurgeResults(rev uint64, ids []string) (int, uint64, error) {
	if len(ids) > distributed.MaxPurgeTaskIDs {
		return 0, 0, invalidTask("too many task IDs")
	}
	if err := checkIDList(ids); err != nil {
		return 0, 0, err
	}
	if rev != r.revision {
		return 0, 0, &distributed.Error{Kind: distributed.KindRevisionConflict, Expected: rev, Actual: r.revision}
	}
	n := 0
	for _, id := range ids {
		if i := r.find(id); i >= 0 {
			r.stored = append(r.stored[:i], r.stored[i+1:]...)
			n++
		}
	}
	r.revision++
	return n, r.revision, nil
}
