package agent

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"sync/atomic"
	"time"

	distributed "github.com/termivar/distributed"
	"github.com/termivar/distributed/client"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// stopReason says why a task is stopped before it ends on its own.
type stopReason int32

const (
	stopNone stopReason = iota
	// stopAbandon: the lease is gone; kill, report nothing.
	stopAbandon
	// stopAbort: the drain's grace ran out; kill, fail the attempt.
	stopAbort
	// stopTimeout: the attempt timeout passed; kill, fail the attempt with
	// reason "timeout".
	stopTimeout
)

// running is one task in flight.
type running struct {
	task    Task
	started bool
	token   []byte // current lease token; only runTask touches it
	stopCh  chan struct{}
	reason  atomic.Int32
}

// stop asks runTask to kill the task; the first reason wins.
func (r *running) stop(why stopReason) {
	if r.reason.CompareAndSwap(int32(stopNone), int32(why)) {
		close(r.stopCh)
	}
}

func (a *Agent) newRunning(lt *pb.LeasedTask) *running {
	r := &running{
		task: Task{
			TaskID: lt.GetTaskId(), ScanID: lt.GetScanId(), Target: lt.GetTargetRef(),
			Phases: lt.GetPhases(), Attempt: lt.GetAttempt(), Fence: lt.GetLeaseId(), Priority: lt.GetPriority(),
			AttemptTimeout: time.Duration(min(lt.GetAttemptTimeoutSecs(), maxAttemptTimeoutSecs)) * time.Second,
		},
		started: lt.GetStarted(),
		token:   lt.GetLeaseToken(),
		stopCh:  make(chan struct{}),
	}
	a.mu.Lock()
	a.running[r.task.TaskID] = r
	a.mu.Unlock()
	return r
}

// finish forgets r and frees its slot.
func (a *Agent) finish(r *running) {
	a.mu.Lock()
	delete(a.running, r.task.TaskID)
	a.mu.Unlock()
	a.signalSlot()
	a.note(loopEvent{kind: evFinished, taskID: r.task.TaskID})
}

// outcome is what running a task produced.
type outcome struct {
	result   []byte
	tooLarge bool
	err      error
	stderr   string // the tail of the command's stderr, for a failure reason
}

// renewInterval is how often a running task's lease is renewed, and how
// long one renewal may take: a third of the TTL, so that two renewals can
// fail (a leader change, a slow network) before the lease runs out.
func renewInterval(ttl time.Duration) time.Duration { return ttl / 3 }

// runTask starts, runs, renews and reports one task. hard ends only when
// the agent crashes.
func (a *Agent) runTask(hard context.Context, r *running) {
	defer a.finish(r)
	log := a.log.With(slog.String("task_id", r.task.TaskID), slog.Uint64("attempt", uint64(r.task.Attempt)))
	ttl := a.cfg.LeaseTTL
	deadline := time.Now().Add(ttl)
	if !r.started {
		if _, err := a.c.Start(hard, &pb.StartRequest{LeaseToken: r.token}); err != nil {
			log.Warn("start rejected; dropping task", slog.String("err", err.Error()))
			a.abandoned.Add(1)
			return
		}
	}
	ctx, cancel := context.WithCancel(hard)
	defer cancel()
	done := make(chan outcome, 1)
	go func() { done <- a.execute(ctx, r.task, log) }()
	renew := time.NewTicker(renewInterval(ttl))
	defer renew.Stop()
	timeout := attemptTimer(r.task.AttemptTimeout)
	defer timeout.Stop()
	for {
		select {
		case <-timeout.C:
			r.stop(stopTimeout)
		case out := <-done:
			a.report(hard, r, out, deadline, log)
			return
		case <-hard.Done():
			cancel()
			<-done
			a.abandoned.Add(1)
			return
		case <-r.stopCh:
			cancel()
			out := <-done
			switch stopReason(r.reason.Load()) {
			case stopAbandon:
				log.Warn("task abandoned: lease no longer ours")
				a.abandoned.Add(1)
			case stopTimeout:
				log.Warn("task killed: attempt timeout", slog.Duration("timeout", r.task.AttemptTimeout))
				a.fail(hard, r, deadline, log, failureReason("timeout: killed after "+r.task.AttemptTimeout.String(), out.stderr))
			default:
				log.Warn("task killed: drain grace period over")
				a.fail(hard, r, deadline, log, failureReason("killed: the agent's drain grace period ran out", out.stderr))
			}
			return
		case <-renew.C:
			rctx, rcancel := context.WithTimeout(hard, renewInterval(ttl))
			resp, err := a.c.RenewLease(rctx, &pb.RenewLeaseRequest{LeaseToken: r.token, LeaseTtlSecs: uint64(ttl / time.Second)})
			rcancel()
			switch {
			case err == nil:
				r.token = resp.GetLeaseToken()
				deadline = time.Now().Add(ttl)
			case hard.Err() != nil:
			case errors.Is(err, distributed.ErrAttemptTimedOut):
				// The server's deadline passed before our timer fired: the
				// lease is still ours until it expires, so report the timeout.
				r.stop(stopTimeout)
			case client.IsUnreachable(err) || errors.Is(err, context.DeadlineExceeded):
				if time.Now().After(deadline) {
					log.Warn("lease expired while the server was unreachable")
					r.stop(stopAbandon)
				}
			default:
				log.Warn("renewal rejected; killing task", slog.String("err", err.Error()))
				r.stop(stopAbandon)
			}
		}
	}
}

// execute runs the task by Handler or Command.
func (a *Agent) execute(ctx context.Context, t Task, log *slog.Logger) outcome {
	max := int(a.maxResult.Load())
	if a.cfg.Handler != nil {
		res, err := a.cfg.Handler(ctx, t)
		if err != nil {
			return outcome{err: err}
		}
		return outcome{result: res, tooLarge: len(res) > max}
	}
	cmd := exec.CommandContext(ctx, a.cfg.Command[0], a.cfg.Command[1:]...)
	setProcessGroup(cmd)
	cmd.Cancel = func() error {
		killGroup(cmd)
		return nil
	}
	cmd.WaitDelay = 5 * time.Second
	cmd.Dir = a.cfg.Dir
	env := a.cfg.Env
	if env == nil {
		env = os.Environ()
	}
	cmd.Env = append(env[:len(env):len(env)],
		"TERMIVAR_TARGET="+t.Target,
		"TERMIVAR_TASK_ID="+t.TaskID,
		"TERMIVAR_SCAN_ID="+t.ScanID,
		"TERMIVAR_PHASES="+client.FormatPhases(t.Phases),
		"TERMIVAR_ATTEMPT="+strconv.FormatUint(uint64(t.Attempt), 10),
		"TERMIVAR_FENCE="+strconv.FormatUint(t.Fence, 10),
	)
	stdout := &boundedBuffer{max: max}
	stderr := &lineLogger{log: log}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	err := cmd.Run()
	// Whatever CMD left running in its process group (background jobs)
	// belongs to this attempt and must not outlive it.
	killGroup(cmd)
	stderr.flush()
	if err != nil {
		return outcome{err: err, stderr: stderr.tail.String()}
	}
	return outcome{result: stdout.buf, tooLarge: stdout.over, stderr: stderr.tail.String()}
}

// report completes or fails the task after it ended on its own.
func (a *Agent) report(ctx context.Context, r *running, out outcome, deadline time.Time, log *slog.Logger) {
	switch {
	case out.err != nil:
		log.Info("task failed", slog.String("err", out.err.Error()))
		a.fail(ctx, r, deadline, log, failureReason(exitReason(out.err, a.cfg.Handler != nil), out.stderr))
		return
	case out.tooLarge:
		log.Warn("task output exceeds the result limit; failing the attempt", slog.Int64("max_result_bytes", a.maxResult.Load()))
		a.fail(ctx, r, deadline, log, failureReason(outputTooLarge(a.maxResult.Load()), out.stderr))
		return
	}
	creq := &pb.CompleteRequest{LeaseToken: r.token, Result: out.result}
	err, carried := a.completeCarried(ctx, r.task.TaskID, creq)
	if !carried {
		err = retryUntil(ctx, deadline, func() error {
			_, err := a.c.Complete(ctx, creq)
			return err
		})
	}
	switch {
	case err == nil:
		a.completed.Add(1)
	case errors.Is(err, distributed.ErrResultTooLarge):
		log.Warn("server rejected the result as too large; failing the attempt", slog.String("err", err.Error()))
		a.fail(ctx, r, deadline, log, failureReason(outputTooLarge(a.maxResult.Load())+" (refused by the server)", out.stderr))
	default:
		log.Warn("complete rejected", slog.String("err", err.Error()))
		a.abandoned.Add(1)
	}
}

// fail reports a failed attempt with its reason (bounded by failureReason).
func (a *Agent) fail(ctx context.Context, r *running, deadline time.Time, log *slog.Logger, reason string) {
	err := retryUntil(ctx, deadline, func() error {
		_, err := a.c.Fail(ctx, &pb.FailRequest{LeaseToken: r.token, Reason: reason})
		return err
	})
	if err != nil {
		log.Warn("fail rejected", slog.String("err", err.Error()))
		a.abandoned.Add(1)
		return
	}
	a.failed.Add(1)
}

// retryUntil calls fn until it succeeds, fails with a rejection, or the
// server stays unreachable past deadline (the lease is gone by then).
func retryUntil(ctx context.Context, deadline time.Time, fn func() error) error {
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil || !client.IsUnreachable(err) || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		if client.Sleep(ctx, client.Backoff(attempt, 200*time.Millisecond, 2*time.Second)) != nil {
			return err
		}
	}
}

// boundedBuffer keeps the first max bytes written and notes overflow.
type boundedBuffer struct {
	buf  []byte
	max  int
	over bool
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	room := b.max - len(b.buf)
	if len(p) > room {
		b.over = true
		b.buf = append(b.buf, p[:max(room, 0)]...)
		return len(p), nil
	}
	b.buf = append(b.buf, p...)
	return len(p), nil
}

// lineLogger logs each line written to it (bounded to 4 KiB per line) and
// keeps the tail of everything written, for the failure reason.
type lineLogger struct {
	log     *slog.Logger
	partial []byte
	tail    tailBuffer
}

const maxStderrLine = 4096

func (l *lineLogger) Write(p []byte) (int, error) {
	n := len(p)
	l.tail.Write(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			l.partial = append(l.partial, p[:min(len(p), max(maxStderrLine-len(l.partial), 0))]...)
			break
		}
		l.partial = append(l.partial, p[:min(i, max(maxStderrLine-len(l.partial), 0))]...)
		l.flush()
		p = p[i+1:]
	}
	return n, nil
}

func (l *lineLogger) flush() {
	if len(l.partial) > 0 {
		l.log.Info("task stderr", slog.String("line", string(l.partial)))
	}
	l.partial = l.partial[:0]
}
