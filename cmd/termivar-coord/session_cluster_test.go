package main

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/termivar/distributed/client"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/gen/termivar/v1/termivarv1connect"
	"github.com/termivar/distributed/internal/apikey"
	"github.com/termivar/distributed/internal/wireerr"
	"github.com/termivar/distributed/server"
)

// TestCluster_WorkerSessionOnFollower: a follower does not forward a
// worker session: it answers the open Unavailable / not_leader with the
// leader's URL, and a WorkerSession client pointed at the follower
// follows the hint and leases through a session on the leader.
func TestCluster_WorkerSessionOnFollower(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	leader := c.leader()
	fi := 0
	for i, n := range c.nodes {
		if n != leader {
			fi = i
			break
		}
	}
	follower := c.nodes[fi]
	admin := c.client(leader.url, c.adminKey)
	key := c.createKey(admin, "worker")
	id, _, err := apikey.Parse(key)
	if err != nil {
		t.Fatal(err)
	}
	waitCond(t, "the key on the follower", func() bool { _, ok := follower.rn.n.Reads().Key(id); return ok })

	h2c := &http.Transport{Protocols: new(http.Protocols)}
	h2c.Protocols.SetUnencryptedHTTP2(true)
	defer h2c.CloseIdleConnections()
	st := termivarv1connect.NewWorkerClient(&http.Client{Transport: h2c}, follower.url).Session(ctx)
	st.RequestHeader().Set("Authorization", "Bearer "+key)
	_ = st.Send(&pb.SessionRequest{Id: 1, Op: &pb.SessionRequest_Acquire{Acquire: &pb.AcquireRequest{WorkerId: "w1"}}})
	_, err = st.Receive()
	var ce *connect.Error
	if !errors.As(err, &ce) {
		t.Fatalf("session open on the follower: %v, want a Connect error", err)
	}
	if d, ok := wireerr.DetailOf(ce); !ok || ce.Code() != connect.CodeUnavailable || d.GetKind() != server.KindNotLeader || ce.Meta().Get(server.LeaderHeader) != leader.url {
		t.Fatalf("session open on the follower: %v (leader hint %q), want not_leader naming %s", err, ce.Meta().Get(server.LeaderHeader), leader.url)
	}
	_ = st.CloseResponse()

	w, err := client.New(client.Config{ServerURL: c.urls(fi), Key: key, WorkerSession: true, MinBackoff: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.RegisterWorker(ctx, &pb.RegisterWorkerRequest{WorkerId: "w1", Capacity: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Enqueue(ctx, &pb.EnqueueRequest{Tasks: []*pb.NewTask{{TaskId: "a", ScanId: "s", TargetRef: "t"}}}); err != nil {
		t.Fatal(err)
	}
	got, err := w.Acquire(ctx, &pb.AcquireRequest{WorkerId: "w1", WaitSecs: 5})
	if err != nil || len(got.GetTasks()) != 1 {
		t.Fatalf("acquire through the follower's URL: %v, %v", got, err)
	}
}
