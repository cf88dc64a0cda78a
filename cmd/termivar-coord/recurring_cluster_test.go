// Recurring scans across a leader kill: a 3-node cluster runs a schedule
// every 2 s; the leader is killed after two ticks; the new leader goes on.
// Every tick from 1 to the last has its scan with exactly the schedule's
// targets (none missed, none doubled: a repeated enqueue would have been
// refused and recorded as the schedule's last error), and the schedule
// keeps up with the clock.
package main

import (
	"context"
	"testing"
	"time"

	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/raftfsm"
)

func TestCluster_ScheduleAcrossLeaderKill(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// Schedules are of cluster version 3, which a new cluster of several
	// voters reaches once every member reported it (docs/node.md).
	waitCond(t, "the newest cluster version on every member", func() bool {
		for _, n := range c.nodes {
			if n.rn.n.ClusterVersion() != raftfsm.SupportedVersion {
				return false
			}
		}
		return true
	})
	admin := c.client(c.urls(0), c.adminKey)
	prodKey := c.createKey(admin, "producer")
	prod := c.client(c.urls(0), prodKey)
	const every = 2
	if _, err := prod.CreateSchedule(ctx, &pb.CreateScheduleRequest{EverySecs: every, ScanPrefix: "rec", Targets: []string{"a", "b"}}); err != nil {
		t.Fatal(err)
	}
	schedule := func() *pb.ScheduleInfo {
		r, err := prod.ListSchedules(ctx, &pb.ListSchedulesRequest{})
		if err != nil || len(r.GetSchedules()) != 1 {
			return nil
		}
		return r.GetSchedules()[0]
	}
	waitCond(t, "two ticks", func() bool { s := schedule(); return s != nil && s.GetLastTick() >= 2 })
	killed := c.leader()
	killedAt := schedule().GetLastTick()
	killed.kill()
	prod = c.client(c.urls(0), prodKey)
	waitCond(t, "three ticks after the kill", func() bool { s := schedule(); return s != nil && s.GetLastTick() >= killedAt+3 })
	s := schedule()
	if s.GetLastError() != "" {
		t.Fatalf("schedule recorded an enqueue failure: %s", s.GetLastError())
	}
	for k := uint64(1); k <= s.GetLastTick(); k++ {
		scan := raftfsm.ScheduleScanID("rec", k)
		p, err := prod.ScanProgress(ctx, &pb.ScanProgressRequest{ScanId: scan})
		if err != nil || p.GetTotal() != 2 {
			t.Fatalf("scan %s: %v tasks (%v), want 2", scan, p.GetTotal(), err)
		}
	}
	// Keeping up: the last tick is at most one period behind the clock.
	due := (uint64(time.Now().Unix())-s.GetStartSecs())/every + 1
	if s.GetLastTick()+1 < due {
		t.Fatalf("last tick %d, but tick %d is due: ticks were missed", s.GetLastTick(), due)
	}
	t.Logf("leader %s killed after tick %d; ticks 1..%d fired once each", killed.id, killedAt, s.GetLastTick())
}
