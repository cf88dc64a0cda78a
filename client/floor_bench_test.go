package client_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/termivar/distributed/client"
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
	srv := newServer(b)
	req := &pb.CompleteManyRequest{Items: []*pb.CompleteRequest{{LeaseToken: []byte("forged"), Result: []byte("r")}}}
	for _, session := range []bool{false, true} {
		name := "unary"
		if session {
			name = "session"
		}
		b.Run(name, func(b *testing.B) {
			c, err := client.New(client.Config{ServerURL: srv.URL, Key: srv.Key, WorkerSession: session})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			if _, err := c.CompleteMany(context.Background(), req); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			cpu0 := processCPU()
			for b.Loop() {
				if _, err := c.CompleteMany(context.Background(), req); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N)/1e3, "cpu-µs/op")
		})
	}
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
