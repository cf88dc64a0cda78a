package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	distributed "github.com/termivar/distributed"
	"github.com/termivar/distributed/client"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// Task is one leased task as a HandlerFunc sees it.
type Task struct {
	TaskID string
	ScanID string
	// Target is the opaque target reference. Never log it.
	Target string
	Phases []byte
	// Attempt is 1 for the first lease of the task, 2 after one retry, ...
	Attempt uint32
	// Fence is the lease ID at start: it only grows across the task's
	// leases, so downstream stores can reject writes from older attempts.
	Fence    uint64
	Priority uint32
	// AttemptTimeout bounds the attempt (0: none): the agent kills the
	// command's process group (or cancels the Handler's context) after it
	// and fails the attempt with reason "timeout".
	AttemptTimeout time.Duration
}

// HandlerFunc runs one task in process and returns its result. It must
// return soon after ctx ends (the lease is gone or the agent is stopping);
// an error fails the attempt.
type HandlerFunc func(ctx context.Context, t Task) ([]byte, error)

// Config configures an Agent. Zero values take the documented defaults.
type Config struct {
	// Client talks to the node; required.
	Client *client.Client
	// WorkerID names the worker; required, one process per ID.
	WorkerID string
	// Capacity is the number of tasks run at once (default 1, at most 256).
	Capacity int
	// Tags are the worker's tags.
	Tags []string
	// Command is the argv run per task. Exactly one of Command and Handler
	// is set.
	Command []string
	// Dir is Command's working directory ("" = the agent's).
	Dir string
	// Env is Command's base environment (nil = the agent's environment);
	// the TERMIVAR_* variables are appended.
	Env []string
	// Handler runs tasks in process instead of Command.
	Handler HandlerFunc
	// LeaseTTL is the lease length asked for (default 30 s, whole seconds,
	// at least 2 s). Renewals go out every third of it.
	LeaseTTL time.Duration
	// HeartbeatInterval is the heartbeat cadence (default 10 s); keep it well
	// under the tenant's heartbeat timeout (60 s by default).
	HeartbeatInterval time.Duration
	// PollWait bounds one Acquire long-poll (default 20 s, at most 60 s).
	PollWait time.Duration
	// Grace is how long a drain waits for running tasks before it kills and
	// fails them (default 30 s).
	Grace time.Duration
	// MaxResultBytes bounds a result; a larger stdout fails the attempt.
	// Zero means the tenant's limit, which the server reports at
	// registration (1 MiB, the default, if it does not); a positive value
	// is capped by the tenant's limit.
	MaxResultBytes int
	// AdaptiveCapacity makes the agent report its host's CPU and memory
	// utilization, by which the node scales the worker's capacity down
	// (contract A.4: ceil(Capacity × (10000 − max utilization) / 10000)).
	// Off by default: the worker reports no utilization and gets the
	// Capacity it declares.
	AdaptiveCapacity bool
	// UtilizationFunc, if set, replaces the CPU and memory utilization read
	// from /proc (basis points, 0-10000) when AdaptiveCapacity is on.
	UtilizationFunc func() (cpuBasisPoints, memoryBasisPoints uint32)
	// Logger receives the agent's log, including CMD's stderr; nil discards
	// it.
	Logger *slog.Logger
}

// Stats counts what an agent did. All fields are totals since New.
type Stats struct {
	// Acquired counts leased tasks received.
	Acquired int64
	// Completed counts tasks completed with a stored result.
	Completed int64
	// Failed counts attempts reported as failed.
	Failed int64
	// Abandoned counts tasks killed without a report because their lease
	// went stale, the task was cancelled or the worker incarnation ended.
	Abandoned int64
	// Registrations counts successful registrations and reactivations.
	Registrations int64
}

// ErrCrashed is returned by Run after Crash.
var ErrCrashed = errors.New("agent: crashed on purpose")

// Agent is one worker. Create it with New and run it with Run, once.
// Stats and Crash are safe to call from any goroutine.
type Agent struct {
	cfg Config
	c   *client.Client
	log *slog.Logger
	cpu cpuSampler

	acquired, completed, failed, abandoned, registrations atomic.Int64
	// maxResult is the result bound in force: Config.MaxResultBytes capped
	// by the tenant's limit learnt at the last registration.
	maxResult atomic.Int64

	mu      sync.Mutex
	gen     uint64              // current worker generation; 0 = not registered
	slots   int                 // the server's effective capacity for us, from the last WorkerInfo
	running map[string]*running // by task ID
	crash   context.CancelFunc  // set by Run
	crashed bool

	slotFree chan struct{} // a task ended
	fenced   chan struct{} // the worker incarnation ended: re-register
	// Completions for the next Acquire (handoff.go): while slotWaiting
	// (under mu) the acquire loop waits for a slot and takes carried,
	// also under mu, when carryCh signals.
	slotWaiting bool
	carried     []*handoff
	carryCh     chan struct{}
	// carryStrikes counts carrying Acquires in a row the server did not
	// answer for (under mu); at carryStrikeLimit completions stop riding
	// until carryOffUntil (handoff.go, carryOutcome).
	carryStrikes  int
	carryOffUntil time.Time

	// hook, when set (tests, before Run), is told of the loop's slot
	// waits, tasks' ends and carried completions' outcomes (events.go).
	hook func(loopEvent)
}

// New checks cfg and returns an Agent.
func New(cfg Config) (*Agent, error) {
	switch {
	case cfg.Client == nil:
		return nil, errors.New("agent: Client is required")
	case !distributed.ValidIdentifier(cfg.WorkerID):
		return nil, errors.New("agent: worker ID must be 1-256 letters, digits, '.', '_', ':' or '-'")
	case (len(cfg.Command) == 0) == (cfg.Handler == nil):
		return nil, errors.New("agent: set exactly one of Command and Handler")
	case cfg.Capacity < 0 || cfg.Capacity > 256:
		return nil, errors.New("agent: capacity must be 1-256")
	}
	cfg.Capacity = cmp.Or(cfg.Capacity, 1)
	cfg.LeaseTTL = cmp.Or(cfg.LeaseTTL, 30*time.Second)
	cfg.LeaseTTL = cfg.LeaseTTL.Truncate(time.Second)
	if cfg.LeaseTTL < 2*time.Second {
		return nil, errors.New("agent: lease TTL must be at least 2s")
	}
	cfg.HeartbeatInterval = cmp.Or(max(cfg.HeartbeatInterval, 0), 10*time.Second)
	cfg.PollWait = cmp.Or(max(cfg.PollWait, 0), 20*time.Second)
	cfg.PollWait = min(cfg.PollWait, 60*time.Second)
	cfg.Grace = cmp.Or(max(cfg.Grace, 0), 30*time.Second)
	cfg.MaxResultBytes = max(cfg.MaxResultBytes, 0)
	log := cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	a := &Agent{
		cfg:      cfg,
		c:        cfg.Client,
		log:      log.With(slog.String("worker_id", cfg.WorkerID)),
		running:  make(map[string]*running),
		slotFree: make(chan struct{}, 1),
		fenced:   make(chan struct{}, 1),
		carryCh:  make(chan struct{}, 1),
	}
	if cfg.AdaptiveCapacity {
		a.cpu.sample() // prime the delta
	}
	return a, nil
}

// Stats returns the agent's counters.
func (a *Agent) Stats() Stats {
	return Stats{
		Acquired: a.acquired.Load(), Completed: a.completed.Load(), Failed: a.failed.Load(),
		Abandoned: a.abandoned.Load(), Registrations: a.registrations.Load(),
	}
}

// Running returns how many tasks run now.
func (a *Agent) Running() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.running)
}

// Crash simulates the agent's process dying: every task is killed at once,
// nothing is reported, the worker is not deregistered, and Run returns
// ErrCrashed. The server recovers the leases when they expire. For demos and
// tests.
func (a *Agent) Crash() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.crashed = true
	if a.crash != nil {
		a.crash()
	}
}

// Run registers the worker and serves tasks until ctx ends, then drains
// (see the package doc) and returns nil. It returns an error only if the
// first registration is rejected (e.g. a bad key), or ErrCrashed.
func (a *Agent) Run(ctx context.Context) error {
	hard, crash := context.WithCancel(context.Background())
	defer crash()
	a.mu.Lock()
	a.crash = crash
	if a.crashed {
		crash()
	}
	a.mu.Unlock()
	soft, stopSoft := context.WithCancel(ctx)
	defer stopSoft()
	defer context.AfterFunc(hard, stopSoft)() // a crash ends soft too, without a bridging goroutine

	if err := a.register(soft); err != nil {
		if hard.Err() != nil {
			return ErrCrashed
		}
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	var wg sync.WaitGroup
	hbCtx, stopHB := context.WithCancel(hard)
	wg.Go(func() { a.heartbeatLoop(hbCtx, soft) })
	var tasks sync.WaitGroup
	a.acquireLoop(soft, hard, &tasks)
	if hard.Err() != nil {
		tasks.Wait()
		stopHB()
		wg.Wait()
		return ErrCrashed
	}
	a.drain(&tasks)
	stopHB()
	wg.Wait()
	a.deregister()
	return nil
}

// drain waits up to Grace for running tasks, then aborts the rest (kill and
// fail).
func (a *Agent) drain(tasks *sync.WaitGroup) {
	done := make(chan struct{})
	go func() {
		tasks.Wait()
		close(done)
	}()
	n := a.Running()
	if n > 0 {
		a.log.Info("draining", slog.Int("running", n), slog.Duration("grace", a.cfg.Grace))
	}
	t := time.NewTimer(a.cfg.Grace)
	defer t.Stop()
	select {
	case <-done:
		return
	case <-t.C:
	}
	a.mu.Lock()
	for _, r := range a.running {
		r.stop(stopAbort)
	}
	a.mu.Unlock()
	<-done
}

func (a *Agent) deregister() {
	a.mu.Lock()
	gen := a.gen
	a.mu.Unlock()
	if gen == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := a.c.Deregister(ctx, &pb.DeregisterRequest{WorkerId: a.cfg.WorkerID, Generation: gen})
	if err != nil {
		a.log.Warn("deregister failed", slog.String("err", err.Error()))
		return
	}
	a.log.Info("deregistered", slog.Uint64("tasks_requeued", uint64(resp.GetSummary().GetTasksRequeued())))
}

// register registers the worker, reactivating it if it exists, retrying
// unreachable servers until ctx ends.
func (a *Agent) register(ctx context.Context) error {
	for attempt := 1; ; attempt++ {
		resp, err := a.registerOnce(ctx)
		if err == nil {
			w := resp.GetWorker()
			a.maxResult.Store(int64(resultBound(a.cfg.MaxResultBytes, resp.GetMaxResultBytes())))
			a.mu.Lock()
			a.gen = w.GetGeneration()
			a.mu.Unlock()
			a.observe(w)
			a.registrations.Add(1)
			a.log.Info("registered", slog.Uint64("generation", w.GetGeneration()), slog.Int("capacity", a.cfg.Capacity),
				slog.Int64("max_result_bytes", a.maxResult.Load()))
			return nil
		}
		if !client.IsUnreachable(err) {
			return fmt.Errorf("agent: register worker: %w", err)
		}
		d := client.Backoff(attempt, 200*time.Millisecond, 5*time.Second)
		a.log.Warn("server unreachable, retrying", slog.String("op", "register"), slog.Duration("backoff", d))
		if client.Sleep(ctx, d) != nil {
			return ctx.Err()
		}
	}
}

func (a *Agent) spec() *pb.RegisterWorkerRequest {
	cpu, mem := a.utilization()
	return &pb.RegisterWorkerRequest{
		WorkerId:          a.cfg.WorkerID,
		Capacity:          uint32(a.cfg.Capacity),
		CpuBasisPoints:    cpu,
		MemoryBasisPoints: mem,
		Tags:              a.cfg.Tags,
	}
}

// utilization returns the CPU and memory utilization in basis points the
// agent reports: none unless AdaptiveCapacity is on.
func (a *Agent) utilization() (cpu, mem uint32) {
	if !a.cfg.AdaptiveCapacity {
		return 0, 0
	}
	if a.cfg.UtilizationFunc != nil {
		cpu, mem = a.cfg.UtilizationFunc()
		return min(cpu, 10000), min(mem, 10000)
	}
	return a.cpu.sample(), memoryBasisPoints()
}

// resultBound is the result bound for a configured value (0: none) and the
// tenant's limit the server reported (0: unknown, the default applies).
func resultBound(configured int, tenant uint64) int {
	limit := int(distributed.DefaultResultLimits().MaxResultBytes)
	if tenant > 0 && tenant <= distributed.MaxResultBytes {
		limit = int(tenant)
	}
	if configured > 0 {
		return min(configured, limit)
	}
	return limit
}

func (a *Agent) registerOnce(ctx context.Context) (*pb.RegisterWorkerResponse, error) {
	resp, err := a.registerAs(ctx, nil)
	if !errors.Is(err, distributed.ErrWorkerAlreadyExists) {
		return resp, err
	}
	// The worker exists: learn its generation (a reactivation naming
	// generation 0 fails with the current one), then reactivate it.
	gen, err := a.currentGeneration(ctx)
	if err != nil {
		return nil, err
	}
	if resp, err = a.registerAs(ctx, &gen); !errors.Is(err, distributed.ErrWorkerAlreadyExists) {
		return resp, err
	}
	// Still live: an earlier process with this ID died without
	// deregistering. Take the ID over; its leases go to the retry rule.
	a.log.Warn("taking over a live worker registration", slog.Uint64("generation", gen))
	if _, err := a.c.Deregister(ctx, &pb.DeregisterRequest{WorkerId: a.cfg.WorkerID, Generation: gen}); err != nil &&
		!errors.Is(err, distributed.ErrWorkerUnavailable) {
		return nil, err
	}
	gen++
	return a.registerAs(ctx, &gen)
}

// registerAs registers the worker, or reactivates the offline generation
// *reactivate when it is set.
func (a *Agent) registerAs(ctx context.Context, reactivate *uint64) (*pb.RegisterWorkerResponse, error) {
	req := a.spec()
	req.ReactivateGeneration = reactivate
	return a.c.RegisterWorker(ctx, req)
}

// observe records the server's view of the worker: its effective capacity
// (Capacity scaled down by the reported utilization) is how many tasks the
// server will lease to it at once, so the agent never long-polls for more.
func (a *Agent) observe(w *pb.WorkerInfo) {
	if w == nil {
		return
	}
	eff := int(w.GetAvailableSlots()) + int(w.GetCurrentTasks())
	eff = max(min(eff, a.cfg.Capacity), 0)
	a.mu.Lock()
	changed := a.slots != eff
	a.slots = eff
	a.mu.Unlock()
	if changed {
		a.log.Debug("effective capacity", slog.Int("slots", eff))
		a.signalSlot()
	}
}

// signalSlot wakes the acquire loop.
func (a *Agent) signalSlot() {
	select {
	case a.slotFree <- struct{}{}:
	default:
	}
}

// currentGeneration returns the worker's current generation.
func (a *Agent) currentGeneration(ctx context.Context) (uint64, error) {
	zero := uint64(0)
	_, err := a.registerAs(ctx, &zero)
	if de, ok := errors.AsType[*distributed.Error](err); ok && de.Kind == distributed.KindWorkerGenerationConflict && de.Actual != 0 {
		return de.Actual, nil
	}
	// Fall back on ListWorkers (admin keys only).
	resp, lerr := a.c.ListWorkers(ctx, &pb.ListWorkersRequest{})
	if lerr == nil {
		for _, w := range resp.GetWorkers() {
			if w.GetWorkerId() == a.cfg.WorkerID {
				return w.GetGeneration(), nil
			}
		}
	}
	err = cmp.Or(err, errors.New("agent: cannot learn the worker's generation"))
	return 0, err
}

// incarnationGone reports whether err says this worker generation no
// longer exists on the server.
func incarnationGone(err error) bool {
	return errors.Is(err, distributed.ErrWorkerGenerationConflict) ||
		errors.Is(err, distributed.ErrWorkerUnavailable) ||
		errors.Is(err, distributed.ErrWorkerNotFound)
}

// heartbeatLoop heartbeats every HeartbeatInterval. When the server says
// the incarnation is gone it abandons every running task and registers
// again (unless the agent is draining).
func (a *Agent) heartbeatLoop(ctx, soft context.Context) {
	t := time.NewTicker(a.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-a.fenced:
		}
		a.mu.Lock()
		gen := a.gen
		a.mu.Unlock()
		// NB: always "healthy": a "busy" worker is not assignable, and the
		// status would stay until the next heartbeat even after slots free
		// up. The server already knows how many tasks the worker holds.
		cpu, mem := a.utilization()
		resp, err := a.c.Heartbeat(ctx, &pb.HeartbeatRequest{
			WorkerId: a.cfg.WorkerID, Generation: gen, Status: "healthy",
			CpuBasisPoints: cpu, MemoryBasisPoints: mem,
		})
		switch {
		case err == nil:
			a.observe(resp.GetWorker())
			continue
		case ctx.Err() != nil:
			return
		case client.IsUnreachable(err):
			a.log.Warn("heartbeat: server unreachable", slog.String("err", err.Error()))
			continue
		case !incarnationGone(err):
			a.log.Warn("heartbeat rejected", slog.String("err", err.Error()))
			continue
		}
		a.log.Warn("worker incarnation ended; abandoning tasks and registering again", slog.String("err", err.Error()))
		a.abandonAll()
		if soft.Err() != nil {
			a.mu.Lock()
			a.gen = 0 // nothing left to deregister
			a.mu.Unlock()
			return
		}
		if err := a.register(soft); err != nil && soft.Err() == nil {
			a.log.Error("re-registration rejected", slog.String("err", err.Error()))
		}
	}
}

// abandonAll kills every running task without reporting.
func (a *Agent) abandonAll() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, r := range a.running {
		r.stop(stopAbandon)
	}
}

// signalFenced asks the heartbeat loop to check the incarnation now.
func (a *Agent) signalFenced() {
	select {
	case a.fenced <- struct{}{}:
	default:
	}
}

// acquireNext makes the loop's next Acquire: for the free slots, or,
// when every slot is busy, once a slot is free or tasks hand over their
// completions, completing those (handoff.go). called is false when it made
// none (a slot came free without a hand-over, or soft ended) or the server
// refused it at capacity.
func (a *Agent) acquireNext(soft context.Context, waitSecs uint32) (resp *pb.AcquireResponse, called bool, err error) {
	a.mu.Lock()
	free, held := a.slots-len(a.running), len(a.running)
	a.slotWaiting = free <= 0
	a.mu.Unlock()
	req := &pb.AcquireRequest{
		WorkerId: a.cfg.WorkerID, LeaseTtlSecs: uint64(a.cfg.LeaseTTL / time.Second),
		WaitSecs: waitSecs, MaxTasks: uint32(max(free, 0)), Start: true,
	}
	if free > 0 {
		resp, err = a.c.Acquire(soft, req)
	} else {
		var hs []*handoff
		if hs, free, held = a.waitSlot(soft); len(hs) == 0 {
			return nil, false, nil
		}
		resp, err = a.carry(soft, hs, req, free)
	}
	if errors.Is(err, distributed.ErrWorkerAtCapacity) {
		a.atCapacity(held)
		return nil, false, nil
	}
	return resp, true, err
}

// atCapacity lowers the slots after the server refused an Acquire at
// capacity: its view of our load changed since the last heartbeat (or it
// predates AcquireRequest.complete and still counted the carried tasks).
// It counted at most held, the tasks running when the Acquire was made;
// NB: not the tasks running now — those that ended during the call (a
// carried completion's fallback Complete) would drop the slots below the
// server's capacity, to 0 with every task gone, until the next heartbeat.
func (a *Agent) atCapacity(held int) {
	a.mu.Lock()
	a.slots = min(a.slots, held)
	a.mu.Unlock()
}

// acquireLoop leases tasks while there are free slots until soft ends.
func (a *Agent) acquireLoop(soft, hard context.Context, tasks *sync.WaitGroup) {
	waitSecs := uint32(a.cfg.PollWait / time.Second)
	failures := 0
	for soft.Err() == nil {
		resp, called, err := a.acquireNext(soft, waitSecs)
		if !called {
			continue
		}
		if err != nil && !errors.Is(err, distributed.ErrNoQueuedTask) {
			if soft.Err() != nil {
				return
			}
			failures++
			switch {
			case client.IsUnreachable(err):
				a.log.Warn("acquire: server unreachable", slog.String("err", err.Error()))
			case incarnationGone(err):
				a.signalFenced()
			default:
				a.log.Warn("acquire rejected", slog.String("err", err.Error()))
			}
			_ = client.Sleep(soft, client.Backoff(failures, 200*time.Millisecond, 5*time.Second))
			continue
		}
		failures = 0
		for _, lt := range resp.GetTasks() {
			a.acquired.Add(1)
			r := a.newRunning(lt)
			tasks.Go(func() { a.runTask(hard, r) })
		}
	}
}
