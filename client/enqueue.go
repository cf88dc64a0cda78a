package client

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"iter"
	"strings"
	"time"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// MaxEnqueueBatch bounds the tasks EnqueueTargets sends in one request (the
// server's own bound is raftfsm.MaxEnqueueTasks, 4096).
const MaxEnqueueBatch = 4096

// MaxReported bounds the duplicate positions and collisions an
// EnqueueResult lists one by one (the counts are always complete).
const MaxReported = 10

// Flow-control backoff of EnqueueTargets while the tenant has no room.
const (
	enqueueMinWait = 20 * time.Millisecond
	enqueueMaxWait = 2 * time.Second
)

var (
	// ErrTaskIDCollision is returned by EnqueueTargets, after it stored
	// everything else, when some targets were not stored because their
	// task ID is held by another scan, by this scan with another target,
	// or by another target earlier in the same input;
	// EnqueueResult.Collisions names them.
	ErrTaskIDCollision = errors.New("client: task ID already held by another scan or target")
	// ErrTargetMismatch is wrapped with ErrTaskIDCollision when one of the
	// collisions is an ID the scan itself holds with a different target.
	ErrTargetMismatch = errors.New("client: task ID already exists in the scan with another target")
	// ErrInvalidTarget is returned by EnqueueTargets for a target the
	// server would refuse (empty, longer than distributed.MaxTargetRefBytes,
	// or containing a NUL byte); the targets before it are stored.
	ErrInvalidTarget = errors.New("client: invalid target")
)

// EnqueueOptions are the settings shared by every task of one
// EnqueueTargets call.
type EnqueueOptions struct {
	// ScanID groups the tasks; required.
	ScanID string
	// Priority is low, normal (default), high or critical.
	Priority string
	// Phases is the wire form of the phase list (see ParsePhases).
	Phases []byte
	// TaskIDs, when non-nil, gives one task ID per target, by position;
	// otherwise IDs come from DeriveTaskID. An input longer or shorter
	// than TaskIDs is an error (the batches before it are stored).
	TaskIDs []string
	// BatchSize bounds the tasks per request (default 1000, at most
	// MaxEnqueueBatch).
	BatchSize int
	// DeclaredTotal, when non-zero, is sent with every batch: the number
	// of distinct targets asked for in the scan, which ScanProgress reports
	// so that the part not yet admitted can be shown (the scan is not
	// finished before it is admitted). Targets found to collide (see
	// ErrTaskIDCollision) are taken off it (by the client for earlier
	// batches, by the server for the batch), so they do not hold the scan
	// open. It needs cluster version 2 (a cluster still
	// at 1 refuses it with cluster_version); leave it 0 there.
	DeclaredTotal uint64
	// AttemptTimeoutSecs bounds each attempt of every task (0: none): the
	// agent stops the command after it and fails the attempt with reason
	// "timeout"; renewals past it are refused. Needs cluster version 2.
	AttemptTimeoutSecs uint64
	// NoWait makes a full queue (queued or active task limit) an error
	// instead of a wait for room.
	NoWait bool
	// WaitForRecords also waits while the task-record or terminal limit
	// is reached, which only frees when terminal tasks are removed (a
	// retention policy); otherwise those limits are errors.
	WaitForRecords bool
	// RetryUnreachableFor keeps a call going while the node cannot be
	// reached (a restart, a leader change, an overloaded node), retrying
	// with the same backoff for up to this long since the last request
	// that got an answer; 0 leaves it to the client's own retries
	// (Config.MaxAttempts). Safe because every request skips what is
	// already stored.
	RetryUnreachableFor time.Duration
	// KeepTaskIDs fills EnqueueResult.TaskIDs.
	KeepTaskIDs bool
	// ProgressFunc, if set, is called after each request with the counts
	// so far.
	ProgressFunc func(EnqueueProgress)
}

// EnqueueProgress is what ProgressFunc learns after each request.
type EnqueueProgress struct {
	// Read counts the targets taken from the input; Stored the distinct
	// ones now stored (EnqueueResult.Stored).
	Read, Stored int
	// Waiting is true while the tenant has no room and the call waits.
	Waiting bool
}

// Collision is a target EnqueueTargets did not store because its task ID
// is already held elsewhere.
type Collision struct {
	// Position is the target's 1-based position in the input.
	Position int
	TaskID   string
	// ScanID is the scan holding the ID (the call's own scan when only the
	// target differs).
	ScanID string
	// InInput is true when the holder is an earlier target of the same
	// input (possible with explicit TaskIDs only).
	InInput bool
}

// EnqueueResult reports what EnqueueTargets did, also when it failed: its
// counts cover what was stored before the error.
type EnqueueResult struct {
	// TaskIDs are the distinct targets' task IDs in input order
	// (KeepTaskIDs only).
	TaskIDs []string
	// Read counts the targets taken from the input.
	Read int
	// Enqueued counts the tasks this call created.
	Enqueued int
	// Existing counts the targets already stored in the scan with the same
	// task ID (a re-run, or a retry whose first reply was lost).
	Existing int
	// Duplicates counts the targets that repeat an earlier target of the
	// input (same task ID and target): stored once, not sent again.
	// DuplicatePositions lists the first MaxReported of them (1-based).
	Duplicates         int
	DuplicatePositions []int
	// Collisions lists the first MaxReported targets not stored because
	// of a task ID collision; CollisionCount counts them all.
	Collisions     []Collision
	CollisionCount int
	// Waits counts the backoff sleeps while the tenant had no room.
	Waits int
}

// Stored counts the distinct targets now stored: enqueued or existing.
func (r EnqueueResult) Stored() int { return r.Enqueued + r.Existing }

// LimitError is returned by EnqueueTargets when a tenant limit it does not
// wait on stops it (see EnqueueOptions.NoWait and WaitForRecords). It
// unwraps to the server's *Error.
type LimitError struct {
	// Name is the limit's name in Limits.Validate's terms, e.g.
	// "max_queued_tasks".
	Name string
	// Value is the limit's value.
	Value uint64
	Err   error
}

// Error implements error.
func (e *LimitError) Error() string {
	return fmt.Sprintf("the tenant's %s limit (%d) is reached: %v", e.Name, e.Value, e.Err)
}

// Unwrap returns the server's error.
func (e *LimitError) Unwrap() error { return e.Err }

// enqueueLimits maps the core's capacity errors of an enqueue to the limit
// behind each and whether the limit frees by itself as workers finish
// tasks.
var enqueueLimits = []struct {
	kind  error
	name  string
	drain bool
}{
	{distributed.ErrQueuedTaskCapacityReached, "max_queued_tasks", true},
	{distributed.ErrActiveTaskCapacityReached, "max_active_tasks", true},
	{distributed.ErrTaskRecordCapacityReached, "max_task_records", false},
	{distributed.ErrTerminalCapacityReserved, "max_terminal_tasks", false},
}

// EnqueueTargets enqueues one task per target of the sequence, in order,
// in batches, and blocks while the tenant has no room: a batch refused
// because the queued or active task limit is reached is halved down to
// one task, which is retried with capped exponential backoff and jitter
// until workers free room or ctx ends. Every request asks the server to
// skip tasks it already stores with the same scan and target, so an
// interrupted call (client or node crash) can be repeated with the same
// input and completes without duplicates. Targets that repeat an earlier
// target are stored once and counted as Duplicates. The input is read
// once, as the batches are sent; memory grows by about 56 bytes per
// distinct target (the duplicate index: 16-byte ID hash → 8-byte target
// hash, 56 MB for 1 000 000 targets, measured).
//
// Errors, with the result of what was stored before: ctx's error; *Error
// from the server (errors.Is against the core's sentinels); *LimitError;
// ErrInvalidTarget; ErrTaskIDCollision (possibly with ErrTargetMismatch)
// when everything else was stored; a plain error for invalid options.
func (c *Client) EnqueueTargets(ctx context.Context, opts EnqueueOptions, targets iter.Seq[string]) (EnqueueResult, error) {
	e, err := newEnqueuer(c, opts)
	if err != nil {
		return EnqueueResult{}, err
	}
	for t := range targets {
		if err := e.add(ctx, t); err != nil {
			return e.res, err
		}
	}
	if opts.TaskIDs != nil && e.res.Read != len(opts.TaskIDs) {
		return e.res, fmt.Errorf("got %d task IDs for %d targets", len(opts.TaskIDs), e.res.Read)
	}
	if err := e.flush(ctx); err != nil {
		return e.res, err
	}
	return e.res, e.collisionErr()
}

// pendingTask is a task read but not sent yet, with its input position.
type pendingTask struct {
	task     *pb.NewTask
	position int
}

type enqueuer struct {
	answered time.Time // when the last request got an answer
	c        *Client
	opts     EnqueueOptions
	prio     string
	max, n   int // configured batch size; current (halved while full)
	pending  []pendingTask
	seen     map[[16]byte][8]byte // task ID hash → target hash (duplicate index)
	res      EnqueueResult
	waits    int // consecutive waits; resets on progress
	mismatch bool
}

func newEnqueuer(c *Client, opts EnqueueOptions) (*enqueuer, error) {
	if !distributed.ValidIdentifier(opts.ScanID) {
		return nil, errors.New("scan ID must be 1-256 letters, digits, '.', '_', ':' or '-'")
	}
	prio, err := ParsePriority(opts.Priority)
	if err != nil {
		return nil, err
	}
	batch := opts.BatchSize
	if batch <= 0 {
		batch = 1000
	}
	batch = min(batch, MaxEnqueueBatch)
	return &enqueuer{c: c, opts: opts, prio: prio, max: batch, n: batch, seen: map[[16]byte][8]byte{}, answered: time.Now()}, nil
}

// add takes the next target: checks it, drops a duplicate, queues it and
// sends a full batch.
func (e *enqueuer) add(ctx context.Context, target string) error {
	e.res.Read++
	pos := e.res.Read
	if err := CheckTarget(target); err != nil {
		if ferr := e.flush(ctx); ferr != nil {
			return ferr
		}
		return fmt.Errorf("target %d %s: %w", pos, err, ErrInvalidTarget)
	}
	id := DeriveTaskID(e.opts.ScanID, target)
	if e.opts.TaskIDs != nil {
		if pos > len(e.opts.TaskIDs) {
			return fmt.Errorf("got %d task IDs for more targets", len(e.opts.TaskIDs))
		}
		id = e.opts.TaskIDs[pos-1]
	}
	key, th := sha256.Sum256([]byte(id)), sha256.Sum256([]byte(target))
	k, h := [16]byte(key[:16]), [8]byte(th[:8])
	if old, ok := e.seen[k]; ok {
		if old == h {
			e.res.Duplicates++
			if len(e.res.DuplicatePositions) < MaxReported {
				e.res.DuplicatePositions = append(e.res.DuplicatePositions, pos)
			}
			return nil
		}
		e.collide(Collision{Position: pos, TaskID: id, ScanID: e.opts.ScanID, InInput: true})
		return nil
	}
	e.seen[k] = h
	if e.opts.KeepTaskIDs {
		e.res.TaskIDs = append(e.res.TaskIDs, id)
	}
	e.pending = append(e.pending, pendingTask{position: pos, task: &pb.NewTask{TaskId: id, ScanId: e.opts.ScanID, TargetRef: target, Phases: e.opts.Phases, Priority: e.prio}})
	if len(e.pending) >= e.max {
		return e.flush(ctx)
	}
	return nil
}

// CheckTarget returns what makes a target one the server refuses (empty,
// too long, a NUL byte), or nil. The error reads after "target N".
func CheckTarget(t string) error {
	switch {
	case t == "":
		return errors.New("is empty")
	case len(t) > distributed.MaxTargetRefBytes:
		return fmt.Errorf("is longer than %d bytes", distributed.MaxTargetRefBytes)
	case strings.IndexByte(t, 0) >= 0:
		return errors.New("contains a NUL byte")
	}
	return nil
}

func (e *enqueuer) collide(c Collision) {
	e.res.CollisionCount++
	if len(e.res.Collisions) < MaxReported {
		e.res.Collisions = append(e.res.Collisions, c)
	}
	if c.ScanID == e.opts.ScanID {
		e.mismatch = true
	}
}

// flush sends every pending task, waiting for room when the tenant is
// full (see EnqueueTargets).
func (e *enqueuer) flush(ctx context.Context) error {
	for len(e.pending) > 0 {
		n := min(e.n, len(e.pending))
		err := e.send(ctx, e.pending[:n])
		if !IsUnreachable(err) {
			e.answered = time.Now()
		}
		if err == nil {
			e.pending = e.pending[n:]
			e.n, e.waits = min(e.n*2, e.max), 0
			e.progress(false)
			continue
		}
		if n > 1 && isCapacity(err) {
			e.n = n / 2 // part of the batch may fit: fill the room first
			continue
		}
		if !e.waitable(err) && !e.rideThrough(err) {
			return e.limitErr(err)
		}
		e.waits++
		e.res.Waits++
		e.progress(true)
		if err := Sleep(ctx, Backoff(e.waits, enqueueMinWait, enqueueMaxWait)); err != nil {
			return err
		}
	}
	return nil
}

// declared is the total to declare: DeclaredTotal less the collisions so
// far (never stored, so the scan could not finish if they counted; the
// server takes off those of the batch itself), at least 1.
func (e *enqueuer) declared() uint64 {
	d := e.opts.DeclaredTotal
	if d == 0 {
		return 0
	}
	return d - min(d-1, uint64(e.res.CollisionCount))
}

// send enqueues one batch (skip_existing) and accounts for its answer.
func (e *enqueuer) send(ctx context.Context, batch []pendingTask) error {
	req := &pb.EnqueueRequest{Tasks: make([]*pb.NewTask, len(batch)), SkipExisting: true,
		DeclaredTotal: e.declared(), AttemptTimeoutSecs: e.opts.AttemptTimeoutSecs}
	for i, p := range batch {
		req.Tasks[i] = p.task
	}
	resp, err := e.c.Enqueue(ctx, req)
	if err != nil {
		return err
	}
	e.res.Enqueued += len(resp.GetTasks())
	e.res.Existing += len(resp.GetExisting())
	for _, col := range resp.GetCollisions() {
		i := int(col.GetIndex())
		if i >= len(batch) {
			return fmt.Errorf("server reported collision at position %d of a batch of %d", i, len(batch))
		}
		e.collide(Collision{Position: batch[i].position, TaskID: col.GetTaskId(), ScanID: col.GetScanId()})
	}
	return nil
}

// rideThrough reports whether an unreachable node is retried: for up to
// RetryUnreachableFor since the last answer.
func (e *enqueuer) rideThrough(err error) bool {
	return IsUnreachable(err) && time.Since(e.answered) < e.opts.RetryUnreachableFor
}

// isCapacity reports whether err is one of the capacity errors of an
// enqueue.
func isCapacity(err error) bool {
	for _, l := range enqueueLimits {
		if errors.Is(err, l.kind) {
			return true
		}
	}
	return false
}

// waitable reports whether err is a full tenant the call waits on.
func (e *enqueuer) waitable(err error) bool {
	if e.opts.NoWait {
		return false
	}
	for _, l := range enqueueLimits {
		if errors.Is(err, l.kind) {
			return l.drain || e.opts.WaitForRecords
		}
	}
	return false
}

// limitErr wraps a capacity error in a *LimitError naming the limit.
func (e *enqueuer) limitErr(err error) error {
	var de *distributed.Error
	for _, l := range enqueueLimits {
		if errors.Is(err, l.kind) && errors.As(err, &de) {
			return &LimitError{Name: l.name, Value: de.Limit, Err: err}
		}
	}
	return err
}

func (e *enqueuer) progress(waiting bool) {
	if e.opts.ProgressFunc != nil {
		e.opts.ProgressFunc(EnqueueProgress{Read: e.res.Read, Stored: e.res.Stored(), Waiting: waiting})
	}
}

func (e *enqueuer) collisionErr() error {
	n := e.res.CollisionCount
	switch {
	case n == 0:
		return nil
	case e.mismatch:
		return fmt.Errorf("%d targets not stored: %w; %w", n, ErrTaskIDCollision, ErrTargetMismatch)
	}
	return fmt.Errorf("%d targets not stored: %w", n, ErrTaskIDCollision)
}
