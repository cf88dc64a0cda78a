package raftfsm

import (
	"reflect"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// need is the authorization a tenant command requires of its principal.
// The empty principal (the node itself) meets every need; any other
// principal must hold a live key of the command's tenant (principalKey).
type need uint8

const (
	// needAdmin: an admin key.
	needAdmin need = iota + 1
	// needProducer: an admin or a producer key.
	needProducer
	// needWorker: an admin key, or the worker key that registered the
	// command's target worker.
	needWorker
	// needBind: an admin key, or a worker key when the target worker ID is
	// unbound or bound to that key (registration binds it, see bind).
	needBind
)

func (n need) String() string {
	if n < needAdmin || n > needBind {
		return "need(?)"
	}
	return [...]string{needAdmin: "admin", needProducer: "producer", needWorker: "worker", needBind: "worker-bind"}[n]
}

// opTarget is what a tenantOps entry's target step decodes from a command
// before it is authorized.
type opTarget struct {
	// worker is the worker the command acts for; needWorker and needBind
	// check the principal against it.
	worker string
	lease  distributed.TaskLease     // set by byLease
	spec   distributed.WorkerSpec    // set by bySpec
	own    distributed.TaskOwnership // set by byOwnership
}

// tenantCall is one tenant command on its way through tenantOps: the
// tenant, the command, the revision and time it applies at, and its
// decoded target. NB: it is passed by value so that it stays on the stack
// (a pointer passed to the table's func values would escape to the heap).
type tenantCall struct {
	t        *Tenant
	cmd      *pb.Command
	rev, now uint64
	opTarget
}

// tenantOp is one row of the tenant command table.
type tenantOp struct {
	need need
	// target, when set, decodes what the command acts on before it is
	// authorized: the worker ID a worker need is checked against, and the
	// lease, spec or ownership the handler uses. A decoding failure is
	// answered before authorization.
	target func(cmd *pb.Command) (opTarget, error)
	// apply runs the authorized command.
	apply func(f *FSM, c tenantCall) Response
	// notify: NotifyFunc is called after the command succeeds, as it may
	// have made queued tasks available.
	notify bool
	// terminates, when set, says after a success which task the command
	// may have made terminal (one), or that it may have made tasks of any
	// scan terminal (!one): the scan tracking follows (scans.go) and
	// ProgressFunc is called.
	terminates func(c tenantCall) (taskID string, one bool)
}

// tenantOps declares every tenant command: its op type, the authorization
// it needs, how its target is decoded and its handler. Commands outside a
// tenant (cluster, tenant and key administration) are dispatched by
// applyOneAt. Read-only after package initialization.
var tenantOps = map[reflect.Type]tenantOp{
	reflect.TypeFor[*pb.Command_Enqueue](): {need: needProducer, notify: true, apply: (*FSM).applyEnqueue},
	reflect.TypeFor[*pb.Command_RegisterWorker](): {need: needBind,
		target: bySpec(func(c *pb.Command) *pb.WorkerSpec { return c.GetRegisterWorker().GetSpec() }),
		apply:  (*FSM).applyRegister},
	reflect.TypeFor[*pb.Command_ReactivateWorker](): {need: needBind,
		target: bySpec(func(c *pb.Command) *pb.WorkerSpec { return c.GetReactivateWorker().GetSpec() }),
		apply:  (*FSM).applyReactivate},
	reflect.TypeFor[*pb.Command_UpdateWorker](): {need: needWorker,
		target: byWorker(func(c *pb.Command) string { return c.GetUpdateWorker().GetWorkerId() }),
		apply:  (*FSM).applyUpdateWorker},
	reflect.TypeFor[*pb.Command_DeregisterWorker](): {need: needWorker, notify: true, terminates: anyTask,
		target: byWorker(func(c *pb.Command) string { return c.GetDeregisterWorker().GetWorkerId() }),
		apply: func(f *FSM, c tenantCall) Response {
			d := c.cmd.GetDeregisterWorker()
			return resp(c.t.pool.DeregisterWorker(c.rev, c.now, d.GetWorkerId(), d.GetGeneration()))
		}},
	reflect.TypeFor[*pb.Command_PruneDeadWorkers](): {need: needAdmin, notify: true, terminates: anyTask,
		apply: func(f *FSM, c tenantCall) Response { return resp(c.t.pool.PruneDeadWorkers(c.rev, c.now)) }},
	reflect.TypeFor[*pb.Command_RecoverExpiredLeases](): {need: needAdmin, notify: true, terminates: anyTask,
		apply: func(f *FSM, c tenantCall) Response { return resp(c.t.pool.RecoverExpiredLeases(c.rev, c.now)) }},
	reflect.TypeFor[*pb.Command_ExpireOldTasks](): {need: needAdmin, notify: true, terminates: anyTask,
		apply: func(f *FSM, c tenantCall) Response {
			return resp(c.t.pool.ExpireOldTasks(c.rev, c.now, c.cmd.GetExpireOldTasks().GetMaxAgeSecs()))
		}},
	reflect.TypeFor[*pb.Command_AssignNextAvailable](): {need: needAdmin,
		apply: func(f *FSM, c tenantCall) Response {
			return resp(c.t.pool.AssignNextAvailable(c.rev, c.now, c.cmd.GetAssignNextAvailable().GetLeaseTtlSecs()))
		}},
	reflect.TypeFor[*pb.Command_AssignNext](): {need: needWorker,
		target: byWorker(func(c *pb.Command) string { return c.GetAssignNext().GetWorkerId() }),
		apply: func(f *FSM, c tenantCall) Response {
			return resp(c.t.pool.AssignNext(c.rev, c.now, c.worker, c.cmd.GetAssignNext().GetLeaseTtlSecs()))
		}},
	reflect.TypeFor[*pb.Command_AssignTask](): {need: needAdmin,
		apply: func(f *FSM, c tenantCall) Response {
			a := c.cmd.GetAssignTask()
			return resp(c.t.pool.AssignTask(c.rev, c.now, a.GetTaskId(), a.GetWorkerId(), a.GetLeaseTtlSecs()))
		}},
	reflect.TypeFor[*pb.Command_AcquireTasks](): {need: needWorker,
		target: byWorker(func(c *pb.Command) string { return c.GetAcquireTasks().GetWorkerId() }),
		apply:  (*FSM).applyAcquire},
	reflect.TypeFor[*pb.Command_StartTask](): {need: needWorker,
		target: byLease(func(c *pb.Command) []byte { return c.GetStartTask().GetLease() }),
		apply:  func(f *FSM, c tenantCall) Response { return resp(c.t.pool.StartTask(c.rev, c.now, c.lease)) }},
	// notify: a completion may free a slot of a scan at its in-flight
	// limit (contract Part F), as cancellations and expiry may.
	reflect.TypeFor[*pb.Command_CompleteTask](): {need: needWorker, notify: true, terminates: leaseTask,
		target: byLease(func(c *pb.Command) []byte { return c.GetCompleteTask().GetLease() }),
		apply:  (*FSM).applyComplete},
	reflect.TypeFor[*pb.Command_FailTask](): {need: needWorker, notify: true, terminates: leaseTask,
		target: byLease(func(c *pb.Command) []byte { return c.GetFailTask().GetLease() }),
		apply: func(f *FSM, c tenantCall) Response {
			return resp(c.t.pool.FailTaskWithReason(c.rev, c.now, c.lease, c.cmd.GetFailTask().GetReason()))
		}},
	reflect.TypeFor[*pb.Command_RenewLease](): {need: needWorker,
		target: byLease(func(c *pb.Command) []byte { return c.GetRenewLease().GetLease() }),
		apply: func(f *FSM, c tenantCall) Response {
			return resp(c.t.pool.RenewLease(c.rev, c.now, c.lease, c.cmd.GetRenewLease().GetLeaseTtlSecs()))
		}},
	reflect.TypeFor[*pb.Command_CancelTask](): {need: needProducer, notify: true,
		terminates: oneTask(func(c tenantCall) string { return c.own.TaskID() }),
		target:     byOwnership(func(c *pb.Command) []byte { return c.GetCancelTask().GetOwnership() }),
		apply:      func(f *FSM, c tenantCall) Response { return resp(c.t.pool.CancelTask(c.rev, c.now, c.own)) }},
	reflect.TypeFor[*pb.Command_PurgeTasks](): {need: needProducer, apply: (*FSM).applyPurge},
	reflect.TypeFor[*pb.Command_CancelTaskById](): {need: needProducer, notify: true,
		terminates: oneTask(func(c tenantCall) string { return c.cmd.GetCancelTaskById().GetTaskId() }),
		apply:      (*FSM).applyCancelByID},
	reflect.TypeFor[*pb.Command_RerunTasks](): {need: needProducer, notify: true,
		apply: (*FSM).applyRerun},
	// Scheduling (contract Part F; schedule.go).
	reflect.TypeFor[*pb.Command_SetSchedulingOptions](): {need: needAdmin, apply: (*FSM).applySetScheduling},
	reflect.TypeFor[*pb.Command_UpdateScan]():           {need: needProducer, notify: true, apply: (*FSM).applyUpdateScan},
	reflect.TypeFor[*pb.Command_AdvanceTime]():          {need: needAdmin, notify: true, apply: (*FSM).applyAdvanceTime},
	// Recurring scans (recurring.go).
	reflect.TypeFor[*pb.Command_CreateSchedule](): {need: needProducer, apply: (*FSM).applyCreateSchedule},
	reflect.TypeFor[*pb.Command_DeleteSchedule](): {need: needProducer, apply: (*FSM).applyDeleteSchedule},
	reflect.TypeFor[*pb.Command_FireSchedule]():   {need: needAdmin, notify: true, apply: (*FSM).applyFireSchedule},
}

// applyTenant applies one tenant command through tenantOps: decode its
// target, authorize the principal for the entry's need, apply, notify.
func (f *FSM) applyTenant(t *Tenant, cmd *pb.Command, rev, now uint64) Response {
	op, ok := tenantOps[reflect.TypeOf(cmd.GetOp())]
	if !ok {
		return Response{Err: fsmErr(KindInvalidCommand, "unknown operation")}
	}
	c := tenantCall{t: t, cmd: cmd, rev: rev, now: now}
	if op.target != nil {
		tg, err := op.target(cmd)
		if err != nil {
			return Response{Err: err}
		}
		c.opTarget = tg
	}
	if err := f.authorize(op.need, &c); err != nil {
		return Response{Err: err}
	}
	r := op.apply(f, c)
	if op.notify && r.Err == nil {
		f.notify(t, cmd)
	}
	if op.terminates != nil && r.Err == nil {
		f.noteTerminations(c, op, r.Value)
	}
	return r
}

// byWorker targets the worker ID the command names.
func byWorker(id func(*pb.Command) string) func(*pb.Command) (opTarget, error) {
	return func(cmd *pb.Command) (opTarget, error) {
		return opTarget{worker: id(cmd)}, nil
	}
}

// bySpec decodes the command's worker spec and targets its worker ID.
func bySpec(spec func(*pb.Command) *pb.WorkerSpec) func(*pb.Command) (opTarget, error) {
	return func(cmd *pb.Command) (opTarget, error) {
		s, err := workerSpec(spec(cmd))
		if err != nil {
			return opTarget{}, err
		}
		return opTarget{worker: s.WorkerID, spec: s}, nil
	}
}

// byLease decodes the command's lease and targets the worker holding it.
func byLease(lease func(*pb.Command) []byte) func(*pb.Command) (opTarget, error) {
	return func(cmd *pb.Command) (opTarget, error) {
		var tg opTarget
		if err := tg.lease.UnmarshalBinary(lease(cmd)); err != nil {
			return opTarget{}, fsmErr(KindInvalidCommand, "lease does not decode")
		}
		tg.worker = tg.lease.WorkerID()
		return tg, nil
	}
}

// byOwnership decodes the command's task ownership; it targets no worker.
func byOwnership(own func(*pb.Command) []byte) func(*pb.Command) (opTarget, error) {
	return func(cmd *pb.Command) (opTarget, error) {
		var tg opTarget
		if err := tg.own.UnmarshalBinary(own(cmd)); err != nil {
			return opTarget{}, fsmErr(KindInvalidCommand, "ownership does not decode")
		}
		return tg, nil
	}
}

// authorize checks that the principal of c meets n in c's tenant. Worker
// keys are bound to the workers they registered (bind).
func (f *FSM) authorize(n need, c *tenantCall) error {
	principal := c.cmd.GetPrincipal()
	k, ok, err := f.principalKey(principal, c.cmd.GetTenant())
	if err != nil || !ok {
		return err
	}
	switch n {
	case needAdmin:
		if k.Role != RoleAdmin {
			return fsmErr(KindPermissionDenied, "operation needs an admin key")
		}
		return nil
	case needProducer:
		if k.Role != RoleAdmin && k.Role != RoleProducer {
			return fsmErr(KindPermissionDenied, "operation needs a producer key")
		}
		return nil
	case needWorker, needBind:
		return authorizeWorker(n, k, c.t.owners, principal, c.worker)
	}
	panic("raftfsm: tenant command table entry has no need: " + n.String())
}

// authorizeWorker allows admin keys, and worker keys for the workers they
// registered; with needBind also for an unbound worker ID.
func authorizeWorker(n need, k KeyRecord, owners map[string]string, principal, workerID string) error {
	switch k.Role {
	case RoleAdmin:
		return nil
	case RoleWorker:
		owner, bound := owners[workerID]
		if owner == principal || (n == needBind && !bound) {
			return nil
		}
		if n == needBind {
			return fsmErr(KindPermissionDenied, "worker is registered with another key")
		}
		return fsmErr(KindPermissionDenied, "worker is not registered with this key")
	}
	return fsmErr(KindPermissionDenied, "operation needs a worker key")
}

func (f *FSM) applyRegister(c tenantCall) Response {
	tr, err := c.t.pool.RegisterWorker(c.rev, c.now, c.spec)
	if err == nil {
		f.bind(c.t, c.cmd.GetPrincipal(), c.spec.WorkerID)
	}
	return resp(tr, err)
}

func (f *FSM) applyReactivate(c tenantCall) Response {
	gen := c.cmd.GetReactivateWorker().GetOfflineGeneration()
	tr, err := c.t.pool.ReactivateWorker(c.rev, c.now, gen, c.spec)
	if err == nil {
		f.bind(c.t, c.cmd.GetPrincipal(), c.spec.WorkerID)
	}
	return resp(tr, err)
}

func (f *FSM) applyUpdateWorker(c tenantCall) Response {
	u := c.cmd.GetUpdateWorker()
	obs, err := observation(u)
	if err != nil {
		return Response{Err: err}
	}
	return resp(c.t.pool.UpdateWorker(c.rev, c.now, u.GetWorkerId(), u.GetGeneration(), obs))
}
