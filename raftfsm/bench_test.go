// Benchmarks of the FSM's tenant command path without raft. Goal: the
// tenantOps dispatch, target decoding and authorization stay cheap (no
// allocation of their own). Method: apply the same command repeatedly: a
// replayed start (answered as a replay, nothing changes) and a refused
// update.
package raftfsm

import (
	"errors"
	"strconv"
	"testing"

	pb "github.com/termivar/distributed/gen/termivar/v1"
)

func BenchmarkFSM_TenantCommand(b *testing.B) {
	tb := setup(b)
	tb.must(b, registerCmd("kw1", "w1"))
	ids := make([]string, 1000)
	for i := range ids {
		ids[i] = "t" + strconv.Itoa(i)
	}
	tb.must(b, enqueueCmd("kprod", ids...))
	acq := valueOf[[]Acquired](b, tb.must(b, acquireCmd("kw1", "w1", 1)))
	lb, err := acq[0].Lease.MarshalBinary()
	if err != nil {
		b.Fatal(err)
	}
	cmd := func(principal string, op any) *pb.Command {
		c := cmdOf(op)
		c.Version, c.NowSecs, c.Tenant, c.Principal = CommandVersion, tb.now, "acme", principal
		return c
	}
	cases := []struct {
		name   string
		cmd    *pb.Command
		denied bool
	}{
		// Starting a started task again: authorized, answered by the core
		// as a replay.
		{"start-replay", cmd("kw1", &pb.Command_StartTask{StartTask: &pb.StartTask{Lease: lb}}), false},
		// Another worker key: refused by authorization.
		{"update-denied", cmd("kw2", &pb.Command_UpdateWorker{UpdateWorker: &pb.UpdateWorker{WorkerId: "w1", Generation: 1}}), true},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				r := tb.f.ApplyCommand(c.cmd).(Response)
				if errors.Is(r.Err, ErrPermissionDenied) != c.denied {
					b.Fatalf("apply = %v, want denied %v", r.Err, c.denied)
				}
			}
		})
	}
}
