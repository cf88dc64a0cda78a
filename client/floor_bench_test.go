package client_test

import (
	"context"
	"testing"

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
