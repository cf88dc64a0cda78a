package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	distributed "github.com/termivar/distributed"
	"github.com/termivar/distributed/client"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/internal/buildinfo"
)

// This file holds the read commands status, tasks and workers, and cancel.

// statusJSON is the --json form of status.
type statusJSON struct {
	NodeID              string `json:"node_id"`
	RaftState           string `json:"raft_state"`
	Leader              string `json:"leader"`
	AppliedIndex        uint64 `json:"applied_index"`
	Tenant              string `json:"tenant"`
	Revision            uint64 `json:"revision"`
	LogicalTime         uint64 `json:"logical_time"`
	TaskRecords         uint32 `json:"task_records"`
	ActiveTasks         uint32 `json:"active_tasks"`
	QueuedTasks         uint32 `json:"queued_tasks"`
	TerminalTasks       uint32 `json:"terminal_tasks"`
	Workers             uint32 `json:"workers"`
	Results             uint32 `json:"results"`
	ResultBytes         uint64 `json:"result_bytes"`
	ResultRetentionSecs uint64 `json:"result_retention_secs"`
	// Build is the answering node's build (nil from an older node).
	Build *buildJSON `json:"build,omitempty"`
	// ClusterVersion and NodeMaxVersion: docs/operations.md, "Upgrade".
	ClusterVersion uint32 `json:"cluster_version"`
	NodeMaxVersion uint32 `json:"node_max_version"`
}

func runStatus(ctx context.Context, env *cliEnv, args []string) error {
	var g globalFlags
	fs := newFlagSet(env, clientCommandNamed("status"), &g, true)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("status takes no arguments")
	}
	c, err := newClient(&g)
	if err != nil {
		return err
	}
	s, err := c.Status(ctx, &pb.StatusRequest{})
	if err != nil {
		return err
	}
	if g.json {
		return writeJSON(env.stdout, statusJSON{
			NodeID: s.GetNodeId(), RaftState: s.GetRaftState(), Leader: s.GetLeader(), AppliedIndex: s.GetAppliedIndex(),
			Tenant: s.GetTenant(), Revision: s.GetRevision(), LogicalTime: s.GetLogicalTime(),
			TaskRecords: s.GetTaskRecords(), ActiveTasks: s.GetActiveTasks(), QueuedTasks: s.GetQueuedTasks(),
			TerminalTasks: s.GetTerminalTasks(), Workers: s.GetWorkers(), Results: s.GetResults(), ResultBytes: s.GetResultBytes(),
			ResultRetentionSecs: s.GetResultRetentionSecs(),
			Build:               nodeBuild(s),
			ClusterVersion:      s.GetClusterVersion(), NodeMaxVersion: s.GetNodeMaxVersion(),
		})
	}
	w := tabwriter.NewWriter(env.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "node\t%s (%s, leader %s, applied index %d)\n", s.GetNodeId(), s.GetRaftState(), s.GetLeader(), s.GetAppliedIndex())
	fmt.Fprintf(w, "tenant\t%s (revision %d, logical time %d)\n", s.GetTenant(), s.GetRevision(), s.GetLogicalTime())
	fmt.Fprintf(w, "tasks\t%d records: %d queued, %d active, %d terminal\n", s.GetTaskRecords(), s.GetQueuedTasks(), s.GetActiveTasks(), s.GetTerminalTasks())
	fmt.Fprintf(w, "workers\t%d\n", s.GetWorkers())
	fmt.Fprintf(w, "results\t%d (%d bytes), retention %s\n", s.GetResults(), s.GetResultBytes(), retentionString(s.GetResultRetentionSecs()))
	if len(s.GetMembers()) > 1 {
		fmt.Fprintf(w, "members\t%s\n", membersLine(s.GetMembers()))
	}
	fmt.Fprintf(w, "version\tcluster %d (this node supports up to %d)\n", s.GetClusterVersion(), s.GetNodeMaxVersion())
	if s.GetBuild() != nil {
		fmt.Fprintf(w, "build\t%s\n", buildinfo.FromProto(s.GetBuild()))
	}
	return w.Flush()
}

// nodeBuild is the build in a Status answer, nil when the node sent none.
func nodeBuild(s *pb.StatusResponse) *buildJSON {
	if s.GetBuild() == nil {
		return nil
	}
	b := toBuildJSON(buildinfo.FromProto(s.GetBuild()))
	return &b
}

// taskJSON is one line of tasks --json.
type taskJSON struct {
	TaskID         string  `json:"task_id"`
	ScanID         string  `json:"scan_id"`
	TargetRef      string  `json:"target_ref"`
	Phases         string  `json:"phases"`
	Priority       string  `json:"priority"`
	Status         string  `json:"status"`
	CreatedAt      uint64  `json:"created_at"`
	StartedAt      *uint64 `json:"started_at,omitempty"`
	CompletedAt    *uint64 `json:"completed_at,omitempty"`
	RetryCount     uint32  `json:"retry_count"`
	Attempt        uint32  `json:"attempt"`
	AssignedTo     string  `json:"assigned_to,omitempty"`
	LeaseID        uint64  `json:"lease_id,omitempty"`
	LeaseExpiresAt uint64  `json:"lease_expires_at,omitempty"`
	HasResult      bool    `json:"has_result"`
	// Beyond the seed (docs/contract.md Part F).
	AttemptTimeoutSecs uint64 `json:"attempt_timeout_secs,omitempty"`
	Reruns             uint32 `json:"reruns,omitempty"`
	LastFailureReason  string `json:"last_failure_reason,omitempty"`
}

func toTaskJSON(t *pb.TaskInfo) taskJSON {
	return taskJSON{
		TaskID: t.GetTaskId(), ScanID: t.GetScanId(), TargetRef: t.GetTargetRef(), Phases: client.FormatPhases(t.GetPhases()),
		Priority: t.GetPriority(), Status: t.GetStatus(), CreatedAt: t.GetCreatedAt(), StartedAt: t.StartedAt, CompletedAt: t.CompletedAt,
		RetryCount: t.GetRetryCount(), Attempt: t.GetAttempt(), AssignedTo: t.GetAssignedTo(), LeaseID: t.GetLeaseId(),
		LeaseExpiresAt: t.GetLeaseExpiresAt(), HasResult: t.GetHasResult(),
		AttemptTimeoutSecs: t.GetAttemptTimeoutSecs(), Reruns: t.GetReruns(), LastFailureReason: t.GetLastFailureReason(),
	}
}

func runTasks(ctx context.Context, env *cliEnv, args []string) error {
	var g globalFlags
	fs := newFlagSet(env, clientCommandNamed("tasks"), &g, true)
	scan := fs.String("scan", "", "only this scan")
	status := fs.String("status", "", "only this status (queued, leased, running, completed, failed, cancelled, expired)")
	limit := fs.Int("limit", 0, "print at most N tasks (0 = all)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("tasks takes no arguments")
	}
	c, err := newClient(&g)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(env.stdout, 0, 0, 2, ' ', 0)
	if !g.json {
		fmt.Fprintln(tw, "TASK\tSCAN\tTARGET\tSTATUS\tPRIORITY\tATTEMPT\tRETRIES\tWORKER\tRESULT\tLAST REASON")
	}
	n := 0
	errStop := fmt.Errorf("limit reached")
	err = c.EachTask(ctx, &pb.ListTasksRequest{ScanId: *scan, Status: *status}, func(t *pb.TaskInfo) error {
		if *limit > 0 && n >= *limit {
			return errStop
		}
		n++
		if g.json {
			return writeJSON(env.stdout, toTaskJSON(t))
		}
		res := "-"
		if t.GetHasResult() {
			res = "yes"
		}
		worker := cmp.Or(t.GetAssignedTo(), "-")
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", t.GetTaskId(), t.GetScanId(), tableTarget(t.GetTargetRef()), t.GetStatus(), t.GetPriority(), t.GetAttempt(), t.GetRetryCount(), worker, res, shortReason(t.GetLastFailureReason()))
		return nil
	})
	if err != nil && err != errStop {
		return err
	}
	if g.json {
		return nil
	}
	return tw.Flush()
}

// maxTableTarget bounds a target in the tasks table; --json has it whole.
const maxTableTarget = 48

// tableTarget is a target as one table cell: control characters (tabs,
// newlines) shown as '?', cut to maxTableTarget runes with a final "…".
func tableTarget(s string) string {
	r := []rune(strings.Map(func(c rune) rune {
		if unicode.IsControl(c) {
			return '?'
		}
		return c
	}, s))
	if len(r) > maxTableTarget {
		return string(r[:maxTableTarget-1]) + "…"
	}
	if len(r) == 0 {
		return "-"
	}
	return string(r)
}

// workerJSON is one line of workers --json.
type workerJSON struct {
	WorkerID   string `json:"worker_id"`
	Generation uint64 `json:"generation"`
	Status     string `json:"status"`
	Capacity   uint32 `json:"capacity"`
	// EffectiveCapacity is Capacity scaled down by the reported
	// utilization; CapacityScaledBy names the utilization that scaled it
	// ("cpu", "memory", "network"), empty when the two are equal.
	EffectiveCapacity uint32   `json:"effective_capacity"`
	CapacityScaledBy  string   `json:"capacity_scaled_by,omitempty"`
	CurrentTasks      uint32   `json:"current_tasks"`
	AvailableSlots    uint32   `json:"available_slots"`
	CompletedTasks    uint64   `json:"completed_tasks"`
	LastHeartbeat     uint64   `json:"last_heartbeat"`
	CPUBasisPoints    uint32   `json:"cpu_basis_points"`
	MemBasisPoints    uint32   `json:"memory_basis_points"`
	NetBasisPoints    uint32   `json:"network_basis_points"`
	Tags              []string `json:"tags"`
}

func runWorkers(ctx context.Context, env *cliEnv, args []string) error {
	var g globalFlags
	fs := newFlagSet(env, clientCommandNamed("workers"), &g, true)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("workers takes no arguments")
	}
	c, err := newClient(&g)
	if err != nil {
		return err
	}
	resp, err := c.ListWorkers(ctx, &pb.ListWorkersRequest{})
	if err != nil {
		return err
	}
	if g.json {
		for _, w := range resp.GetWorkers() {
			tags := w.GetTags()
			if tags == nil {
				tags = []string{}
			}
			if err := writeJSON(env.stdout, workerJSON{
				WorkerID: w.GetWorkerId(), Generation: w.GetGeneration(), Status: w.GetStatus(), Capacity: w.GetCapacity(),
				EffectiveCapacity: w.GetEffectiveCapacity(), CapacityScaledBy: scaledBy(w),
				CurrentTasks: w.GetCurrentTasks(), AvailableSlots: w.GetAvailableSlots(), CompletedTasks: w.GetCompletedTasks(),
				LastHeartbeat: w.GetLastHeartbeat(), CPUBasisPoints: w.GetCpuBasisPoints(), MemBasisPoints: w.GetMemoryBasisPoints(),
				NetBasisPoints: w.GetNetworkBasisPoints(), Tags: tags,
			}); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(env.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKER\tGEN\tSTATUS\tTASKS\tCAPACITY\tCOMPLETED\tCPU\tMEM\tHEARTBEAT")
	for _, w := range resp.GetWorkers() {
		hb := time.Unix(int64(w.GetLastHeartbeat()), 0).Format(time.TimeOnly)
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d/%d\t%s\t%d\t%.1f%%\t%.1f%%\t%s\n", w.GetWorkerId(), w.GetGeneration(), w.GetStatus(),
			w.GetCurrentTasks(), w.GetEffectiveCapacity(), capacityText(w), w.GetCompletedTasks(),
			float64(w.GetCpuBasisPoints())/100, float64(w.GetMemoryBasisPoints())/100, hb)
	}
	return tw.Flush()
}

// scaledBy names the utilization that scales a worker's capacity down
// (the highest of cpu, memory and network, contract A.4), or "" when the
// effective capacity is the declared one.
func scaledBy(w *pb.WorkerInfo) string {
	if w.GetEffectiveCapacity() == w.GetCapacity() {
		return ""
	}
	name, top := "cpu", w.GetCpuBasisPoints()
	if w.GetMemoryBasisPoints() > top {
		name, top = "memory", w.GetMemoryBasisPoints()
	}
	if w.GetNetworkBasisPoints() > top {
		name = "network"
	}
	return name
}

// capacityText is the CAPACITY column: the declared capacity, and when the
// node scaled it down, to what and by which utilization.
func capacityText(w *pb.WorkerInfo) string {
	by := scaledBy(w)
	if by == "" {
		return fmt.Sprint(w.GetCapacity())
	}
	bp := map[string]uint32{"cpu": w.GetCpuBasisPoints(), "memory": w.GetMemoryBasisPoints(), "network": w.GetNetworkBasisPoints()}[by]
	return fmt.Sprintf("%d, scaled to %d by %s %.1f%% (--adaptive-capacity)", w.GetCapacity(), w.GetEffectiveCapacity(), by, float64(bp)/100)
}

func runCancel(ctx context.Context, env *cliEnv, args []string) error {
	var g globalFlags
	fs := newFlagSet(env, clientCommandNamed("cancel"), &g, true)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("usage: termivar-coord cancel TASK")
	}
	id := fs.Arg(0)
	c, err := newClient(&g)
	if err != nil {
		return err
	}
	resp, err := c.Cancel(ctx, &pb.CancelRequest{TaskId: id})
	if errors.Is(err, distributed.ErrInvalidTransition) {
		// A terminal task: say which status it ended in.
		status := "terminal"
		if t, gerr := c.GetTask(ctx, &pb.GetTaskRequest{TaskId: id}); gerr == nil {
			status = t.GetTask().GetStatus()
		}
		return rejectedError{fmt.Sprintf("task %s is already %s; only queued, leased or running tasks can be cancelled", id, status)}
	}
	if err != nil {
		return err
	}
	if g.json {
		return writeJSON(env.stdout, map[string]any{"task_id": id, "already_cancelled": resp.GetAlreadyCancelled(),
			"previous_status": resp.GetPreviousStatus(), "revision": resp.GetRevision()})
	}
	if resp.GetAlreadyCancelled() {
		fmt.Fprintf(env.stdout, "task %s was already cancelled\n", id)
	} else {
		fmt.Fprintf(env.stdout, "cancelled task %s (was %s)\n", id, resp.GetPreviousStatus())
	}
	return nil
}
