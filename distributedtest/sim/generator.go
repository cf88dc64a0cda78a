package sim

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	distributed "github.com/termivar/distributed"
	"github.com/termivar/distributed/distributedtest/model"
)

// Profile is a family of runs: limits small enough that every bound is hit,
// and identifier pools small enough that commands collide.
type Profile struct {
	Name    string
	Limits  distributed.Limits
	Tasks   int // size of the task ID pool
	Workers int // size of the worker ID pool
	Steps   int // commands per seed in the CI run (the records fill up: nothing is evicted)
	// Results bounds the ResultAggregator driven next to the pool (zero:
	// DefaultSimResultLimits()).
	Results distributed.ResultLimits
}

// DefaultSimResultLimits returns result limits small enough that every
// result bound is hit.
func DefaultSimResultLimits() distributed.ResultLimits {
	return distributed.ResultLimits{
		MaxResults: 12, MaxResultBytes: 48, MaxTotalBytes: 300, MaxAggregateItems: 5, MaxAggregateBytes: 60,
	}
}

// ResultLimits returns the profile's result limits.
func (p Profile) ResultLimits() distributed.ResultLimits {
	return cmp.Or(p.Results, DefaultSimResultLimits())
}

func lim(records, active, queued, terminal, workers int, retries uint32, leaseTTL, taskTTL, heartbeat uint64) distributed.Limits {
	return distributed.Limits{
		MaxTaskRecords: records, MaxActiveTasks: active, MaxQueuedTasks: queued, MaxTerminalTasks: terminal,
		MaxWorkers: workers, MaxRetries: retries, MaxLeaseTTLSecs: leaseTTL, MaxTaskTTLSecs: taskTTL,
		HeartbeatTimeoutSecs: heartbeat,
	}
}

// AllProfiles returns the limit families the simulator cycles through (seed
// modulo the count picks one), a new slice on every call.
func AllProfiles() []Profile {
	return []Profile{
		{"tiny", lim(6, 4, 3, 6, 3, 1, 20, 200, 60), 8, 4, 200, distributed.ResultLimits{MaxResults: 3, MaxResultBytes: 16, MaxTotalBytes: 40, MaxAggregateItems: 2, MaxAggregateBytes: 20}},
		{"small", lim(48, 8, 6, 40, 4, 2, 60, 600, 90), 64, 6, 320, distributed.ResultLimits{}},
		{"no-retry", lim(96, 12, 12, 96, 5, 0, 40, 900, 80), 128, 6, 800, distributed.ResultLimits{}},
		{"medium", lim(320, 32, 24, 256, 8, 3, 120, 2400, 150), 400, 10, 2000, distributed.ResultLimits{}},
		{"many-retries", lim(64, 16, 16, 64, 4, 32, 15, 4000, 40), 80, 5, 500, distributed.ResultLimits{}},
		{"one-worker", lim(24, 6, 6, 24, 1, 2, 30, 500, 60), 32, 2, 200, distributed.ResultLimits{}},
	}
}

// Generator produces commands for one run. It reads the reference model (the
// state both implementations agree on so far) to aim its choices, and learns
// proofs from the replies it gets — a reply can be lost, in which case the
// simulated client never learns the lease.
type Generator struct {
	src Source
	p   Profile
	// probe makes the generator also produce inputs on which the core was
	// known to diverge from the contract or ADR (regress_test.go); on by
	// default, off through SkipKnownDivergences to explore everything else
	// while such a divergence is open.
	probe    bool
	m        *model.Model
	known    []model.Lease     // leases learned from replies (newest last)
	cancels  []model.Ownership // proofs that cancelled a task (for replays)
	receipts []model.Receipt   // receipts learned from completions
	sent     map[string][]byte // the last result bytes sent per task
	recent   []Command         // recently applied commands (for duplicates)
	fresh    int
	tasks    []model.Task // the model's tasks when Next was called
}

// SetSource replaces the source of choices (the rapid test draws from the
// current *rapid.T).
func (g *Generator) SetSource(src Source) { g.src = src }

// SkipKnownDivergences stops the generator from producing inputs of known
// divergences.
func (g *Generator) SkipKnownDivergences() { g.probe = false }

// NewGenerator returns a generator reading choices from src.
func NewGenerator(src Source, p Profile, m *model.Model) *Generator {
	return &Generator{src: src, p: p, m: m, probe: true}
}

func (g *Generator) n(n int) int { return g.src.Intn(n) }

func (g *Generator) pct(p int) bool { return g.n(100) < p }

var opWeights = [numOps]int{
	OpEnqueue: 12, OpEnqueueBatch: 3, OpRegister: 4, OpUpdate: 14, OpDeregister: 2, OpPrune: 2, OpReactivate: 2,
	OpAssignNextAvailable: 10, OpAssignNext: 5, OpAssignTask: 4, OpStart: 10, OpComplete: 8,
	OpFail: 5, OpRenew: 5, OpCancel: 4, OpCancelByID: 2, OpRecover: 3, OpExpire: 2, OpGetTask: 2, OpGetWorker: 1,
	OpPeek: 1, OpAvailable: 2, OpStoreResult: 6, OpGetResult: 1, OpAggregate: 2, OpRestart: 1,
	OpPurge: 3, OpPurgeResults: 2, OpRerun: 3,
}

var totalWeight = func() int {
	t := 0
	for _, w := range opWeights {
		t += w
	}
	return t
}()

// hostileIDs are identifiers that must be rejected without being echoed
// (all at most 256 bytes so that they fit in an encoded proof), plus the
// longest valid one.
var hostileIDs = []string{
	"", "bad id", "naïve", "t\n1", "../etc/passwd", "t00\x00", "<script>", "a/b", "%s%n",
	strings.Repeat("z", 256),
}

// tooLong is rejected by spec validation (and cannot be encoded in a proof).
var tooLong = strings.Repeat("x", distributed.MaxIdentifierBytes+1)

// Next returns the next command.
func (g *Generator) Next() Command {
	if len(g.recent) > 0 && g.pct(5) {
		// Fault: a duplicate (retried with a fresh revision) or a delayed,
		// reordered delivery of an earlier command with its original values.
		c, _ := g.Duplicate()
		return c
	}
	g.tasks = g.m.TaskRecords()
	op := g.pickOp()
	if op >= OpStart && op <= OpRenew && len(g.currentLeases()) == 0 && g.pct(75) {
		// Nothing is leased: mostly do something that can lease.
		op = g.pickOp()
	}
	return g.Build(op)
}

// Duplicate returns a duplicate or reordered delivery of a recent command
// (false if there is none yet).
func (g *Generator) Duplicate() (Command, bool) {
	if len(g.recent) == 0 {
		return Command{}, false
	}
	c := g.recent[g.n(len(g.recent))]
	if g.pct(60) {
		c.AbsRev, c.AbsNow = false, false
		c.RevDelta, c.NowDelta = 0, int64(g.n(3))
		c.Note = "duplicate"
	} else {
		c.AbsRev, c.AbsNow = true, true
		c.Note = "reordered"
	}
	return c, true
}

// Build returns a command of the given op with generated arguments.
func (g *Generator) Build(op Op) Command {
	g.tasks = g.m.TaskRecords()
	c := Command{Op: op}
	g.clock(&c)
	switch op {
	case OpEnqueue:
		c.TaskSpec = g.taskSpec(&c)
	case OpEnqueueBatch:
		for range 1 + g.n(4) {
			c.TaskSpecs = append(c.TaskSpecs, g.taskSpec(&c))
		}
		if g.pct(3) {
			c.TaskSpecs = nil
			g.note(&c, "empty-batch")
		}
	case OpRegister:
		c.WorkerSpec = g.workerSpec(&c)
	case OpReactivate:
		c.WorkerSpec = g.workerSpec(&c)
		c.Generation = g.generation(c.WorkerSpec.WorkerID)
	case OpUpdate:
		c.WorkerID = g.workerID(&c)
		c.Generation = g.generation(c.WorkerID)
		c.Obs = g.observation(&c)
	case OpDeregister:
		c.WorkerID = g.workerID(&c)
		c.Generation = g.generation(c.WorkerID)
	case OpAssignNextAvailable:
		c.TTL = g.ttl(&c)
	case OpAssignNext:
		c.WorkerID = g.workerID(&c)
		c.TTL = g.ttl(&c)
	case OpAssignTask:
		c.TaskID = g.queuedTaskID(&c)
		c.WorkerID = g.workerID(&c)
		c.TTL = g.ttl(&c)
	case OpStart, OpComplete:
		c.Lease = g.lease(&c)
	case OpFail:
		c.Lease = g.lease(&c)
		c.Reason = g.reason(&c)
	case OpRerun:
		c.Rerun = g.rerunRequest(&c)
	case OpRenew:
		c.Lease = g.lease(&c)
		c.TTL = g.ttl(&c)
	case OpCancel:
		c.Own = g.ownership(&c)
	case OpCancelByID:
		c.TaskID = g.taskID(&c)
	case OpExpire:
		c.MaxAge = g.maxAge(&c)
	case OpGetTask:
		c.TaskID = g.taskID(&c)
	case OpGetWorker:
		c.WorkerID = g.workerID(&c)
	case OpStoreResult:
		c.Receipt = g.receipt(&c)
		c.Data = g.resultBytes(&c, c.Receipt.TaskID)
	case OpGetResult:
		c.TaskID = g.resultTaskID(&c)
	case OpPurge:
		c.Purge = g.purgeFilter(&c)
	case OpPurgeResults:
		c.IDs = g.idList(&c, g.resultTaskID)
	case OpAggregate:
		for range g.n(7) {
			c.IDs = append(c.IDs, g.resultTaskID(&c))
		}
		if len(c.IDs) > 0 && g.pct(10) {
			c.IDs = append(c.IDs, c.IDs[g.n(len(c.IDs))])
			g.note(&c, "repeated-id")
		}
	}
	return c
}

// receipt picks a learned receipt mostly, else an altered, forged, zero or
// hostile one.
func (g *Generator) receipt(c *Command) model.Receipt {
	base := model.Receipt{TaskID: "t001", WorkerID: "w0", TaskGeneration: 0, Attempt: 1, LeaseID: 1, WorkerGeneration: 1, RecordVersion: 4}
	if len(g.receipts) > 0 {
		base = g.receipts[g.n(len(g.receipts))]
	}
	switch r := g.n(100); {
	case r < 75:
		return base
	case r < 88:
		g.note(c, "altered-receipt")
		switch g.n(6) {
		case 0:
			base.TaskGeneration++
		case 1:
			base.Attempt++
		case 2:
			base.LeaseID++
		case 3:
			base.WorkerID = fmt.Sprintf("w%d", g.n(g.p.Workers))
		case 4:
			base.WorkerGeneration++
		case 5:
			base.RecordVersion--
		}
		return base
	case r < 93:
		g.note(c, "zero-receipt")
		return model.Receipt{}
	case r < 96:
		if g.pct(50) {
			base.TaskID = g.hostile(c)
		} else {
			base.WorkerID = g.hostile(c)
		}
		return base
	default:
		g.note(c, "forged-receipt")
		base.TaskID = fmt.Sprintf("t%03d", g.n(g.p.Tasks))
		return base
	}
}

func (g *Generator) resultBytes(c *Command, taskID string) []byte {
	if prev, ok := g.sent[taskID]; ok && g.pct(50) {
		return prev
	}
	max := g.p.ResultLimits().MaxResultBytes
	n := g.n(max + 1)
	if g.pct(8) {
		n = max + 1 + g.n(8)
		g.note(c, "too-large")
	}
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(g.n(256))
	}
	if g.sent == nil {
		g.sent = map[string][]byte{}
	}
	g.sent[taskID] = b
	return b
}

func (g *Generator) resultTaskID(c *Command) string {
	if len(g.receipts) > 0 && g.pct(70) {
		return g.receipts[g.n(len(g.receipts))].TaskID
	}
	return g.taskID(c)
}

func (g *Generator) pickOp() Op {
	r := g.n(totalWeight)
	op := Op(0)
	for ; op < numOps-1; op++ {
		if r < opWeights[op] {
			break
		}
		r -= opWeights[op]
	}
	return op
}

func (g *Generator) note(c *Command, s string) {
	if c.Note == "" {
		c.Note = s
	} else {
		c.Note += "," + s
	}
}

// clock picks the revision and time faults.
func (g *Generator) clock(c *Command) {
	switch r := g.n(100); {
	case r < 5:
		c.RevDelta = -int64(1 + g.n(3))
		g.note(c, "stale-rev")
	case r < 7:
		c.RevDelta = int64(1 + g.n(3))
		g.note(c, "future-rev")
	}
	l := g.p.Limits
	switch r := g.n(1000); {
	case r < 480:
		c.NowDelta = 0
	case r < 880:
		c.NowDelta = 1
	case r < 960:
		c.NowDelta = int64(2 + g.n(9))
	case r < 975:
		c.NowDelta = int64(l.MaxLeaseTTLSecs/2 + uint64(g.n(int(2*l.HeartbeatTimeoutSecs+1))))
		g.note(c, "jump")
	default:
		c.NowDelta = -int64(1 + g.n(5))
		g.note(c, "time-regress")
	}
}

func (g *Generator) hostile(c *Command) string {
	g.note(c, "hostile-id")
	return hostileIDs[g.n(len(hostileIDs))]
}

func (g *Generator) taskID(c *Command) string {
	if g.pct(4) {
		return g.hostile(c)
	}
	return fmt.Sprintf("t%03d", g.n(g.p.Tasks))
}

func (g *Generator) workerID(c *Command) string {
	if g.pct(4) {
		return g.hostile(c)
	}
	if ws := g.m.Workers(); len(ws) > 0 && g.pct(85) {
		// Mostly a registered worker, preferring one that is not offline.
		w := ws[g.n(len(ws))]
		if w.Status == distributed.WorkerOffline && g.pct(70) {
			w = ws[g.n(len(ws))]
		}
		return w.WorkerID
	}
	return fmt.Sprintf("w%d", g.n(g.p.Workers))
}

// queuedTaskID prefers a task that is queued right now.
func (g *Generator) queuedTaskID(c *Command) string {
	if g.pct(70) {
		var q []string
		for _, t := range g.tasks {
			if t.Status == distributed.TaskQueued {
				q = append(q, t.TaskID)
			}
		}
		if len(q) > 0 {
			return q[g.n(len(q))]
		}
	}
	return g.taskID(c)
}

func (g *Generator) taskSpec(c *Command) distributed.TaskSpec {
	s := distributed.TaskSpec{
		TaskID:    fmt.Sprintf("t%03d", g.n(g.p.Tasks)),
		ScanID:    fmt.Sprintf("scan-%d", g.n(3)),
		TargetRef: g.target(),
		Priority:  distributed.TaskPriority(g.n(4)),
	}
	if g.pct(15) {
		g.fresh++
		s.TaskID = fmt.Sprintf("f%d", g.fresh)
	}
	for range g.n(4) {
		s.Phases = append(s.Phases, uint8(g.n(256)))
	}
	if g.pct(25) {
		// Around the lease TTLs, so that renewals meet the deadline.
		s.AttemptTimeoutSecs = 1 + uint64(g.n(int(2*g.p.Limits.MaxLeaseTTLSecs)))
	}
	if g.pct(2) {
		g.note(c, "bad-timeout")
		s.AttemptTimeoutSecs = distributed.MaxTaskTTLSecs + 1 + uint64(g.n(3))
	}
	if g.pct(6) {
		g.note(c, "bad-spec")
		switch g.n(9) {
		case 0:
			s.TaskID = hostileIDs[g.n(len(hostileIDs)-1)]
		case 1:
			s.TaskID = tooLong
		case 2:
			s.ScanID = hostileIDs[g.n(len(hostileIDs)-1)]
		case 3:
			s.ScanID = tooLong
		case 4:
			s.TargetRef = ""
		case 5:
			s.TargetRef = strings.Repeat("T", distributed.MaxTargetRefBytes+g.n(2))
		case 6:
			s.Phases = make([]uint8, distributed.MaxTaskPhases+g.n(2))
		case 7:
			s.Priority = distributed.TaskPriority(3 + g.n(253))
		case 8:
			s.TaskID, s.ScanID, s.TargetRef = "", tooLong, ""
		}
	}
	return s
}

// target returns an opaque target: any bytes, not only identifier bytes.
func (g *Generator) target() string {
	n := 1 + g.n(12)
	b := make([]byte, n)
	for i := range b {
		if g.pct(80) {
			b[i] = byte('a' + g.n(26))
		} else {
			b[i] = byte(g.n(256))
		}
	}
	return string(b)
}

func (g *Generator) util() uint16 {
	switch r := g.n(100); {
	case r < 40:
		return 0
	case r < 90:
		return uint16(g.n(9000))
	case r < 97:
		return uint16(9000 + g.n(1001))
	default:
		return 10000
	}
}

func (g *Generator) workerSpec(c *Command) distributed.WorkerSpec {
	s := distributed.WorkerSpec{
		WorkerID:           fmt.Sprintf("w%d", g.n(g.p.Workers)),
		Capacity:           uint32(1 + g.n(4)),
		CPUBasisPoints:     g.util(),
		MemoryBasisPoints:  g.util(),
		NetworkBasisPoints: g.util(),
	}
	for range g.n(6) {
		s.Tags = append(s.Tags, distributed.WorkerTag(g.n(5)))
	}
	if g.probe && g.pct(3) {
		// D1 (fixed): more than five tags that are at most five distinct ones.
		g.note(c, "six-raw-tags")
		s.Tags = append(s.Tags, distributed.TagLinux, distributed.TagLinux, distributed.TagLinux, distributed.TagLinux, distributed.TagLinux, distributed.TagLinux)
	}
	if g.pct(6) {
		g.note(c, "bad-spec")
		switch g.n(7) {
		case 0:
			s.WorkerID = hostileIDs[g.n(len(hostileIDs)-1)]
		case 1:
			s.WorkerID = tooLong
		case 2:
			s.Capacity = 0
		case 3:
			s.Capacity = distributed.MaxWorkerCapacity + uint32(g.n(2))
			if g.pct(50) {
				s.Capacity = ^uint32(0)
			}
		case 4:
			s.MemoryBasisPoints = 10001 + uint16(g.n(1000))
		case 5:
			s.Tags = append(s.Tags[:min(len(s.Tags), 4)], distributed.WorkerTag(5+g.n(250)))
		case 6:
			s.WorkerID, s.Capacity, s.CPUBasisPoints = "", 0, 65535
		}
	}
	return s
}

func (g *Generator) observation(c *Command) distributed.WorkerObservation {
	o := distributed.WorkerObservation{CPUBasisPoints: g.util(), MemoryBasisPoints: g.util(), NetworkBasisPoints: g.util()}
	switch r := g.n(100); {
	case r < 84:
		o.Status = distributed.WorkerHealthy
	case r < 89:
		o.Status = distributed.WorkerBusy
	case r < 94:
		o.Status = distributed.WorkerDegraded
	case r < 97:
		o.Status = distributed.WorkerOffline
		g.note(c, "offline-heartbeat")
	default:
		o.Status = distributed.WorkerStatus(4 + g.n(252))
		g.note(c, "bad-status")
	}
	if g.pct(3) {
		o.NetworkBasisPoints = 10001
		g.note(c, "bad-util")
	}
	return o
}

// generation returns the worker's current generation mostly, else a stale,
// future or zero one.
func (g *Generator) generation(workerID string) uint64 {
	cur := uint64(1)
	if w, ok, _ := g.m.GetWorker(workerID); ok {
		cur = w.Generation
	}
	switch r := g.n(100); {
	case r < 82:
		return cur
	case r < 92:
		if cur > 0 {
			return cur - 1
		}
		return 0
	case r < 97:
		return cur + 1
	default:
		return uint64(g.n(1 << 16))
	}
}

func (g *Generator) ttl(c *Command) uint64 {
	return g.bound(c, g.p.Limits.MaxLeaseTTLSecs, 85, 90, 95, "bad-ttl")
}

func (g *Generator) maxAge(c *Command) uint64 {
	return g.bound(c, g.p.Limits.MaxTaskTTLSecs, 80, 88, 94, "bad-age")
}

// bound picks a value in 1..max below the first percentile, max below the
// second, else (noted as bad) 0 below the third or a value above max.
func (g *Generator) bound(c *Command, max uint64, in, atMax, zero int, bad string) uint64 {
	switch r := g.n(100); {
	case r < in:
		return 1 + uint64(g.n(int(max)))
	case r < atMax:
		return max
	case r < zero:
		g.note(c, bad)
		return 0
	default:
		g.note(c, bad)
		return max + 1 + uint64(g.n(1000))
	}
}

func (g *Generator) currentLeases() []model.Lease {
	var out []model.Lease
	for _, t := range g.tasks {
		if t.HasLease {
			out = append(out, t.Lease)
		}
	}
	return out
}

// lease picks a lease: a known current one, one read from the state, an old
// known one (stale, or the proof of a terminal outcome: replays), an altered
// or forged one, the zero lease, or one with hostile identifiers.
func (g *Generator) lease(c *Command) model.Lease {
	cur := g.currentLeases()
	isCur := func(l model.Lease) bool { return slices.Contains(cur, l) }
	r := g.n(100)
	if r < 45 {
		var live []model.Lease
		for _, l := range g.known {
			if isCur(l) {
				live = append(live, l)
			}
		}
		if len(live) > 0 {
			return live[g.n(len(live))]
		}
		r = 45
	}
	switch {
	case r < 65:
		if len(cur) > 0 {
			g.note(c, "read-lease")
			return cur[g.n(len(cur))]
		}
		fallthrough
	case r < 76:
		if len(g.known) > 0 {
			g.note(c, "old-lease")
			return g.known[g.n(len(g.known))]
		}
		fallthrough
	case r < 85:
		base := model.Lease{TaskID: "t00", WorkerID: "w0", WorkerGeneration: 1, Attempt: 1, LeaseID: 1, ExpiresAt: 10}
		if len(cur) > 0 {
			base = cur[g.n(len(cur))]
		} else if len(g.known) > 0 {
			base = g.known[g.n(len(g.known))]
		}
		g.note(c, "altered-lease")
		return g.alter(base)
	case r < 90:
		if len(cur) > 0 && g.pct(50) {
			// A lease the client learned from the task record itself.
			return cur[g.n(len(cur))]
		}
		g.note(c, "zero-lease")
		return model.Lease{}
	case r < 97:
		l := model.Lease{TaskID: "t01", WorkerID: "w1", WorkerGeneration: 1, Attempt: 1, LeaseID: 1, ExpiresAt: 99}
		if len(cur) > 0 {
			l = cur[g.n(len(cur))]
		}
		if g.pct(50) {
			l.TaskID = g.hostile(c)
		} else {
			l.WorkerID = g.hostile(c)
		}
		return l
	default:
		g.note(c, "forged-lease")
		return model.Lease{
			TaskID:           fmt.Sprintf("t%03d", g.n(g.p.Tasks)),
			WorkerID:         fmt.Sprintf("w%d", g.n(g.p.Workers)),
			WorkerGeneration: uint64(g.n(4)),
			TaskGeneration:   uint64(g.n(4)),
			Attempt:          uint32(g.n(4)),
			LeaseID:          uint64(g.n(64)),
			AcquiredAt:       uint64(g.n(1000)),
			ExpiresAt:        uint64(g.n(100000)),
		}
	}
}

// alter changes exactly one field of l.
func (g *Generator) alter(l model.Lease) model.Lease {
	d := uint64(1 + g.n(2))
	switch g.n(9) {
	case 0:
		l.TaskID = fmt.Sprintf("t%03d", g.n(g.p.Tasks))
	case 1:
		l.WorkerID = fmt.Sprintf("w%d", g.n(g.p.Workers))
	case 2:
		l.WorkerGeneration += d
	case 3:
		l.TaskGeneration ^= d
	case 4:
		l.Attempt += uint32(d)
	case 5:
		l.LeaseID += d
	case 6:
		l.AcquiredAt ^= d
	case 7:
		l.ExpiresAt += d * 1000
	case 8:
		l.LeaseID ^= 1 << 40
	}
	return l
}

func (g *Generator) ownership(c *Command) model.Ownership {
	r := g.n(100)
	switch {
	case r < 45:
		var fences []model.Ownership
		for _, t := range g.tasks {
			if o, ok := t.Ownership(); ok && !o.IsLease {
				fences = append(fences, o)
			}
		}
		if len(fences) > 0 {
			o := fences[g.n(len(fences))]
			if g.pct(20) {
				g.note(c, "altered-fence")
				switch g.n(3) {
				case 0:
					o.Fence.TaskGeneration++
				case 1:
					o.Fence.RecordVersion += uint64(1 + g.n(2))
				case 2:
					o.Fence.RecordVersion--
				}
			}
			return o
		}
	case r < 55:
		if len(g.cancels) > 0 {
			g.note(c, "cancel-replay")
			return g.cancels[g.n(len(g.cancels))]
		}
	case r < 58:
		g.note(c, "zero-fence")
		return model.Ownership{}
	case r < 60:
		g.note(c, "hostile-fence")
		return model.Ownership{Fence: model.Fence{TaskID: hostileIDs[g.n(len(hostileIDs))], RecordVersion: 1}}
	}
	return model.Ownership{IsLease: true, Lease: g.lease(c)}
}

// Observe lets the simulated clients learn from a reply (the model's, which
// equals the core's when the step passed). A reply is lost with 5 %
// probability.
func (g *Generator) Observe(c Command, out Outcome) {
	g.recent = append(g.recent, c)
	if len(g.recent) > 16 {
		g.recent = g.recent[1:]
	}
	if out.Err != nil || g.pct(5) {
		return
	}
	switch v := out.Value.(type) {
	case model.Lease:
		g.learn(v)
	case model.Completion:
		g.receipts = append(g.receipts, v.Receipt)
		if len(g.receipts) > 64 {
			g.receipts = g.receipts[1:]
		}
	}
	if c.Op == OpCancel {
		g.cancels = append(g.cancels, c.Own)
		if len(g.cancels) > 32 {
			g.cancels = g.cancels[1:]
		}
	}
}

func (g *Generator) learn(l model.Lease) {
	g.known = append(g.known, l)
	if len(g.known) > 64 {
		g.known = g.known[1:]
	}
}

// reason picks a failure reason: none (FailTask) half the time, else a
// short or maximal valid one, an oversize one or invalid UTF-8.
func (g *Generator) reason(c *Command) string {
	switch r := g.n(100); {
	case r < 50:
		return ""
	case r < 88:
		return fmt.Sprintf("exit status %d", g.n(256))
	case r < 93:
		return strings.Repeat("é", distributed.MaxFailureReasonBytes/2)
	case r < 97:
		g.note(c, "long-reason")
		return strings.Repeat("x", distributed.MaxFailureReasonBytes+1+g.n(3))
	default:
		g.note(c, "bad-utf8-reason")
		return "stderr \xff\xfe"
	}
}

// rerunRequest names mostly terminal tasks (so that re-runs happen), else
// any task IDs, and sometimes an invalid request.
func (g *Generator) rerunRequest(c *Command) distributed.RerunRequest {
	var terminal []string
	for _, t := range g.tasks {
		if t.Status.Terminal() {
			terminal = append(terminal, t.TaskID)
		}
	}
	var req distributed.RerunRequest
	seen := map[string]bool{}
	for range 1 + g.n(4) {
		id := fmt.Sprintf("t%03d", g.n(g.p.Tasks))
		if len(terminal) > 0 && g.pct(75) {
			id = terminal[g.n(len(terminal))]
		}
		if !seen[id] {
			seen[id] = true
			req.TaskIDs = append(req.TaskIDs, id)
		}
	}
	all := []distributed.TaskStatus{distributed.TaskFailed, distributed.TaskExpired, distributed.TaskCancelled}
	if g.pct(50) {
		for _, s := range all {
			if g.pct(50) {
				req.Statuses = append(req.Statuses, s)
			}
		}
	}
	switch r := g.n(100); {
	case r < 3:
		g.note(c, "empty-rerun")
		req.TaskIDs = nil
	case r < 6:
		g.note(c, "repeated-id")
		req.TaskIDs = append(req.TaskIDs, req.TaskIDs[0])
	case r < 9:
		req.TaskIDs = append(req.TaskIDs, g.hostile(c))
	case r < 12:
		g.note(c, "bad-status")
		req.Statuses = append(req.Statuses, distributed.TaskStatus(g.n(4)*60))
	}
	return req
}

// purgeFilter picks a purge: mostly by scan, by time, by named tasks
// (terminal ones mostly; also live, absent, hostile and repeated IDs), or
// everything terminal; sometimes a filter that mixes IDs with a scan.
func (g *Generator) purgeFilter(c *Command) distributed.PurgeFilter {
	var f distributed.PurgeFilter
	switch r := g.n(100); {
	case r < 30:
		f.ScanID = fmt.Sprintf("scan-%d", g.n(3))
		if g.pct(5) {
			f.ScanID = g.hostile(c)
		}
		if g.pct(30) {
			f.FinishedBefore = g.before()
		}
	case r < 55:
		f.FinishedBefore = g.before()
	case r < 88:
		f.TaskIDs = g.idList(c, g.purgeTaskID)
	case r < 95:
		g.note(c, "purge-all")
	default:
		g.note(c, "purge-mixed-filter")
		f.ScanID = "scan-0"
		f.TaskIDs = []string{g.purgeTaskID(c)}
	}
	return f
}

// before returns a FinishedBefore around logical time (0 means no bound).
func (g *Generator) before() uint64 {
	now := g.m.LogicalTime()
	back := uint64(g.n(40))
	if back > now {
		return now + 1
	}
	return now - back + 1
}

// purgeTaskID prefers a terminal task, then any task ID.
func (g *Generator) purgeTaskID(c *Command) string {
	if g.pct(75) {
		var term []string
		for _, t := range g.tasks {
			if t.Status.Terminal() {
				term = append(term, t.TaskID)
			}
		}
		if len(term) > 0 {
			return term[g.n(len(term))]
		}
	}
	return g.taskID(c)
}

// idList returns 0–4 IDs from pick, sometimes with one repeated.
func (g *Generator) idList(c *Command, pick func(*Command) string) []string {
	var ids []string
	for range g.n(5) {
		id := pick(c)
		dup := false
		for _, x := range ids {
			dup = dup || x == id
		}
		if !dup || g.pct(10) {
			ids = append(ids, id)
		}
	}
	if len(ids) > 0 && g.pct(5) {
		ids = append(ids, ids[0])
		g.note(c, "repeated-id")
	}
	return ids
}
