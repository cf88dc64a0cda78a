package client_test

import (
	"context"
	"fmt"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/termivar/distributed/client"
	"github.com/termivar/distributed/client/clienttest"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// BenchmarkClient_GetTask is one authenticated read call through the
// client and the clienttest server in this process (both ends; no log):
// the per-call floor of issue 15 ("rpc_floor" of bench --suite).
func BenchmarkClient_GetTask(b *testing.B) {
	srv := newServer(b)
	c := newKeyClient(b, srv, "", newGate(false), 0)
	if _, err := c.Enqueue(context.Background(), oneTask("x")); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.GetTask(context.Background(), &pb.GetTaskRequest{TaskId: "x"}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkClient_WorkerCallFloor is one worker call that the server
// answers without the log (a CompleteMany of one forged token: its item
// fails before anything is proposed), through the client and the
// clienttest server in this process, as a unary HTTP/1.1 call and as a
// message of a worker session (h2c): the per-call floor of each path.
// cpu-µs/op is the process's CPU (getrusage) per call, both ends.
func BenchmarkClient_WorkerCallFloor(b *testing.B) {
	req := &pb.CompleteManyRequest{Items: []*pb.CompleteRequest{{LeaseToken: []byte("forged"), Result: []byte("r")}}}
	floorRuns(b, func(srv *clienttest.Server, session bool) client.Config {
		return client.Config{ServerURL: srv.URL, Key: srv.Key, WorkerSession: session}
	}, func(c *client.Client) error {
		_, err := c.CompleteMany(context.Background(), req)
		return err
	})
}

// BenchmarkClient_EnqueueFloor is one producer's Enqueue that the core
// refuses (an invalid task ID) on the clienttest server's in-memory
// backend (no raft, no disk: the same work every call), as a unary HTTP/1.1 call
// and as a message of a producer session (h2c), from one caller and
// from 16 concurrent callers of one client (whose calls the coalescer
// shares): the per-call floor of the producer side of issue 15's one
// task per call (docs/benchmarks.md, "One task per call, session 7").
func BenchmarkClient_EnqueueFloor(b *testing.B) {
	bad := oneTask("bad id")
	floorRuns(b, func(srv *clienttest.Server, session bool) client.Config {
		return client.Config{ServerURL: srv.URL, Key: srv.Key, ProducerSession: session}
	}, func(c *client.Client) error {
		if _, err := c.Enqueue(context.Background(), bad); client.KindOf(err) != "invalid_task" {
			return fmt.Errorf("enqueue of a bad id: %w", err)
		}
		return nil
	})
}

// floorRuns runs call as sub-benchmarks unary and session (cfg's client
// without and with its session), each from one caller and from 16, with
// the process's CPU per call (cpu-µs/op, both ends).
func floorRuns(b *testing.B, cfg func(*clienttest.Server, bool) client.Config, call func(*client.Client) error) {
	srv := newServer(b)
	for _, session := range []bool{false, true} {
		for _, callers := range []int{1, 16} {
			name := map[bool]string{false: "unary", true: "session"}[session] + "/callers=" + strconv.Itoa(callers)
			b.Run(name, func(b *testing.B) {
				c, err := client.New(cfg(srv, session))
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				if err := call(c); err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				cpu0 := processCPU()
				if callers == 1 {
					for b.Loop() {
						if err := call(c); err != nil {
							b.Fatal(err)
						}
					}
				} else {
					b.SetParallelism(callers)
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							if err := call(c); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N)/1e3, "cpu-µs/op")
			})
		}
	}
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
