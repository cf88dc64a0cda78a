package distributed

// Per-record estimates of ExportState's encoding beyond a record's strings
// (varints, flags, length prefixes; a completed task's receipt). They only
// size the encoder: a longer encoding still grows it.
const (
	taskExportOverheadBytes      = 64
	completedExportOverheadBytes = 64
	workerExportOverheadBytes    = 64
)

// exportSizeHint estimates the encoding of the tasks ids and every worker,
// so that exportTasks sizes its encoder once instead of doubling it from
// 256 bytes: a snapshot of 1 M tasks allocated about three times its pool
// encoding (docs/benchmarks.md, issue 15). The caller holds the lock.
func (c *coordinator) exportSizeHint(ids []string) int {
	n := 256
	for _, id := range ids {
		t := c.tasks[id]
		n += len(t.id) + len(t.scanID()) + len(t.target) + len(t.phases()) + taskExportOverheadBytes
		if t.status == TaskCompleted {
			n += completedExportOverheadBytes
		}
	}
	return n + len(c.workers)*workerExportOverheadBytes
}
