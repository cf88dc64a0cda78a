package raftfsm

import (
	"crypto/sha256"
	"encoding/hex"
	"math"
	"sort"
	"strconv"

	"google.golang.org/protobuf/proto"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// Recurring scans (issue 12; ADR 0003): a schedule enqueues a new scan at
// every tick. The leader's ticker proposes FireSchedule(name, tick) when a
// tick is due; the FSM fires a tick only as the next one (last_tick + 1)
// and only when due at the command's stamped time, so two leaders that
// propose the same tick fire it once, and a leader that took over after
// missed ticks fires each of them, in order.

// Bounds of schedules.
const (
	// MaxSchedules bounds a tenant's schedules.
	MaxSchedules = 64
	// MaxScheduleEverySecs is the longest period (a year).
	MaxScheduleEverySecs = 366 * 86400
	// MaxScheduleCatchUp bounds the ticks one ticker round proposes per
	// schedule (the rest follow on the next rounds).
	MaxScheduleCatchUp = 16
)

// ScheduleScanID is the scan a schedule's tick enqueues.
func ScheduleScanID(prefix string, tick uint64) string {
	return prefix + "-" + strconv.FormatUint(tick, 10)
}

// scheduleTaskID derives a tick's task ID from its scan and target, as
// client.DeriveTaskID does: "t-" and 24 hex digits of SHA-256(scan NUL
// target).
func scheduleTaskID(scanID string, target []byte) string {
	h := sha256.New()
	h.Write([]byte(scanID))
	h.Write([]byte{0})
	h.Write(target)
	return "t-" + hex.EncodeToString(h.Sum(nil))[:24]
}

// tickDue returns the stamped second at which tick k (≥ 1) is due,
// saturating.
func tickDue(s *pb.Schedule, k uint64) uint64 {
	steps := k - 1
	if s.GetEverySecs() != 0 && steps > (math.MaxUint64-s.GetStartSecs())/s.GetEverySecs() {
		return math.MaxUint64
	}
	return s.GetStartSecs() + steps*s.GetEverySecs()
}

// validateSchedule checks a CreateSchedule's fields.
func validateSchedule(c *pb.CreateSchedule) error {
	switch {
	case !distributed.ValidIdentifier(c.GetName()):
		return distributed.NewInvalidTaskError("schedule name is invalid")
	case c.GetEverySecs() == 0 || c.GetEverySecs() > MaxScheduleEverySecs:
		return distributed.NewInvalidTaskError("schedule period must be 1 s to 366 days")
	case !distributed.ValidIdentifier(ScheduleScanID(c.GetScanPrefix(), math.MaxUint64)) || c.GetScanPrefix() == "":
		return distributed.NewInvalidTaskError("schedule scan prefix is invalid")
	case len(c.GetTargets()) == 0 || len(c.GetTargets()) > MaxEnqueueTasks:
		return distributed.NewInvalidTaskError("schedule needs 1 to 4096 targets")
	case c.GetPriority() > uint32(distributed.PriorityCritical):
		return distributed.NewInvalidTaskError("priority is invalid")
	}
	seen := make(map[string]bool, len(c.GetTargets()))
	for _, t := range c.GetTargets() {
		if len(t) == 0 || len(t) > distributed.MaxTargetRefBytes || seen[string(t)] {
			return distributed.NewInvalidTaskError("schedule targets must be 1 to 1024 bytes and distinct")
		}
		seen[string(t)] = true
	}
	return nil
}

func (f *FSM) applyCreateSchedule(c tenantCall) Response {
	m := c.cmd.GetCreateSchedule()
	if err := validateSchedule(m); err != nil {
		return Response{Err: err}
	}
	switch {
	case c.t.schedules[m.GetName()] != nil:
		return Response{Err: fsmErr(KindInvalidCommand, "schedule exists")}
	case len(c.t.schedules) >= MaxSchedules:
		return Response{Err: fsmErr(KindInvalidCommand, "too many schedules")}
	}
	c.t.schedules[m.GetName()] = &pb.Schedule{Name: m.GetName(), EverySecs: m.GetEverySecs(), ScanPrefix: m.GetScanPrefix(),
		Targets: m.GetTargets(), Priority: m.GetPriority(), StartSecs: c.now}
	return Response{}
}

func (f *FSM) applyDeleteSchedule(c tenantCall) Response {
	name := c.cmd.GetDeleteSchedule().GetName()
	if c.t.schedules[name] == nil {
		return Response{Err: fsmErr(KindInvalidCommand, "no such schedule")}
	}
	delete(c.t.schedules, name)
	return Response{}
}

// FireValue is FireSchedule's value: whether this command fired the tick
// (false: it had been fired before), the scan and the enqueue failure kind.
type FireValue struct {
	Fired  bool
	ScanID string
	Error  string
}

// applyFireSchedule fires tick k: the next one and due. The enqueue is one
// core EnqueueBatch; if the core refuses it (capacity), the tick still
// counts as fired and records the error kind, so it is not retried forever.
func (f *FSM) applyFireSchedule(c tenantCall) Response {
	m := c.cmd.GetFireSchedule()
	s := c.t.schedules[m.GetName()]
	switch {
	case s == nil:
		return Response{Err: fsmErr(KindInvalidCommand, "no such schedule")}
	case m.GetTick() != 0 && m.GetTick() <= s.GetLastTick():
		return Response{Value: FireValue{ScanID: ScheduleScanID(s.GetScanPrefix(), m.GetTick())}}
	case m.GetTick() != s.GetLastTick()+1:
		return Response{Err: fsmErr(KindInvalidCommand, "schedule ticks fire in order")}
	case tickDue(s, m.GetTick()) > c.now:
		return Response{Err: fsmErr(KindInvalidCommand, "schedule tick is not due")}
	}
	scan := ScheduleScanID(s.GetScanPrefix(), m.GetTick())
	e := &pb.EnqueueTasks{Tasks: make([]*pb.TaskSpec, len(s.GetTargets()))}
	for i, t := range s.GetTargets() {
		e.Tasks[i] = &pb.TaskSpec{TaskId: scheduleTaskID(scan, t), ScanId: scan, TargetRef: t, Priority: s.GetPriority()}
	}
	r := f.applyEnqueue(tenantCall{t: c.t, cmd: &pb.Command{Op: &pb.Command_Enqueue{Enqueue: e}}, rev: c.rev, now: c.now})
	s.LastTick, s.LastError = m.GetTick(), ""
	if r.Err != nil {
		s.LastError = KindOf(r.Err)
	}
	return Response{Revision: r.Revision, Value: FireValue{Fired: true, ScanID: scan, Error: s.LastError}}
}

// ScheduleCommands returns the FireSchedule commands due at now, per
// schedule in name order the next MaxScheduleCatchUp due ticks.
func (v TenantView) ScheduleCommands(now uint64) []*pb.Command {
	v.f.mu.RLock()
	defer v.f.mu.RUnlock()
	var ops []*pb.Command
	for _, name := range sortedKeys(v.t.schedules) {
		s := v.t.schedules[name]
		for k := s.GetLastTick() + 1; k <= s.GetLastTick()+MaxScheduleCatchUp && tickDue(s, k) <= now; k++ {
			ops = append(ops, &pb.Command{Tenant: v.t.name, Op: &pb.Command_FireSchedule{FireSchedule: &pb.FireSchedule{Name: name, Tick: k}}})
		}
	}
	return ops
}

// Schedules returns copies of the tenant's schedules in name order.
func (v TenantView) Schedules() []*pb.Schedule {
	v.f.mu.RLock()
	defer v.f.mu.RUnlock()
	out := make([]*pb.Schedule, 0, len(v.t.schedules))
	for _, name := range sortedKeys(v.t.schedules) {
		out = append(out, proto.Clone(v.t.schedules[name]).(*pb.Schedule))
	}
	return out
}

// NextTickSecs is when a schedule's next tick is due.
func NextTickSecs(s *pb.Schedule) uint64 { return tickDue(s, s.GetLastTick()+1) }

// exportSchedules lists a tenant's schedules for its snapshot.
func exportSchedules(t *Tenant) []*pb.Schedule {
	out := make([]*pb.Schedule, 0, len(t.schedules))
	for _, name := range sortedKeys(t.schedules) {
		out = append(out, t.schedules[name])
	}
	return out
}

// restoreSchedules validates and installs a snapshot's schedules.
func restoreSchedules(t *Tenant, ss []*pb.Schedule) bool {
	if len(ss) > MaxSchedules {
		return false
	}
	names := make([]string, 0, len(ss))
	for _, s := range ss {
		c := &pb.CreateSchedule{Name: s.GetName(), EverySecs: s.GetEverySecs(), ScanPrefix: s.GetScanPrefix(), Targets: s.GetTargets(), Priority: s.GetPriority()}
		if validateSchedule(c) != nil || t.schedules[s.GetName()] != nil {
			return false
		}
		t.schedules[s.GetName()] = proto.Clone(s).(*pb.Schedule)
		names = append(names, s.GetName())
	}
	return sort.StringsAreSorted(names)
}
