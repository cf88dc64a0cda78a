// Test of Follow with DeleteAfterRead against the in-memory clienttest
// server. Goal: every result is passed once; AckFunc runs before each call
// that acknowledges results and before the final acknowledgement; after
// Follow returns every completed task is purged; an AckFunc error ends
// Follow with nothing more acknowledged.
package client_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/termivar/distributed/client"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

func TestClient_FollowDeleteAfterRead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	leases := startScan(t, b.c, "d", 4)
	for i := 1; i <= 4; i++ {
		id := fmt.Sprintf("d-t%d", i)
		if _, err := b.c.Complete(ctx, &pb.CompleteRequest{LeaseToken: leases[id], Result: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	exists := func(id string) bool {
		_, err := b.c.GetTask(ctx, &pb.GetTaskRequest{TaskId: id})
		return err == nil
	}
	// An AckFunc that fails ends Follow before anything is acknowledged.
	boom := errors.New("disk full")
	var got []string
	err := b.c.Follow(ctx, client.FollowOptions{ScanID: "d", DeleteAfterRead: true, AckFunc: func() error { return boom }},
		func(r client.Result) error { got = append(got, r.TaskID); return nil })
	if !errors.Is(err, boom) || len(got) != 4 || !exists("d-t1") || !exists("d-t4") {
		t.Fatalf("Follow with a failing AckFunc = %v after %v; tasks kept: %v %v", err, got, exists("d-t1"), exists("d-t4"))
	}
	got = nil
	acks := 0
	err = b.c.Follow(ctx, client.FollowOptions{ScanID: "d", DeleteAfterRead: true, AckFunc: func() error { acks++; return nil }},
		func(r client.Result) error { got = append(got, r.TaskID+"="+string(r.Result)); return nil })
	if err != nil || strings.Join(got, ",") != "d-t1=1,d-t2=2,d-t3=3,d-t4=4" || acks != 1 {
		t.Fatalf("Follow = %v, results %v, %d acknowledgements, want each result once and one acknowledgement", err, got, acks)
	}
	for i := 1; i <= 4; i++ {
		if id := fmt.Sprintf("d-t%d", i); exists(id) {
			t.Fatalf("task %s still exists after Follow with DeleteAfterRead returned", id)
		}
	}
}
