// Pre-authentication through a follower. Goal: a follower that does not
// know a key forwards the request to the leader, which decides and charges
// a failure to the client's address (verified Termivar-Forwarded-For), not
// to the follower; so a client that fails through a follower is throttled
// while other clients behind the same follower are not. Method: a
// 3-member cluster on loopback, clients dialing from distinct 127.0.0.x
// source addresses.
package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/gen/termivar/v1/termivarv1connect"
	"github.com/termivar/distributed/internal/audit"
	"github.com/termivar/distributed/internal/wireerr"
	"github.com/termivar/distributed/server"
)

// adminFrom returns an Admin client of url with key whose connections come
// from localIP.
func adminFrom(t *testing.T, url, localIP, key string) termivarv1connect.AdminClient {
	t.Helper()
	tr := &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(localIP)}}).DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	return termivarv1connect.NewAdminClient(&http.Client{Transport: tr}, url, connect.WithInterceptors(connect.UnaryInterceptorFunc(
		func(next connect.UnaryFunc) connect.UnaryFunc {
			return func(ctx context.Context, r connect.AnyRequest) (connect.AnyResponse, error) {
				r.Header().Set("Authorization", "Bearer "+key)
				return next(ctx, r)
			}
		})))
}

func TestCluster_FailedAuthThroughFollowerChargedToClient(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	leader := c.leader()
	var follower *tnode
	for _, n := range c.nodes {
		if n != leader {
			follower = n
			break
		}
	}
	waitCond(t, "the follower knowing the leader", func() bool { return follower.rn.n.LeaderAPIURL() == leader.url })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bad := adminFrom(t, follower.url, "127.0.0.5", "tvk_0000000000000000_guessedsecret")
	burst := server.DefaultLimits().AuthFailureBurst
	for i := range burst {
		_, err := bad.Status(ctx, connect.NewRequest(&pb.StatusRequest{}))
		if connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Fatalf("bad key attempt %d through the follower: %v, want unauthenticated", i, err)
		}
	}
	_, err := bad.Status(ctx, connect.NewRequest(&pb.StatusRequest{}))
	if d, _ := wireerr.DetailOf(err); connect.CodeOf(err) != connect.CodeResourceExhausted || d.GetKind() != server.KindAuthThrottled {
		t.Fatalf("attempt past the burst: %v, want auth_throttled", err)
	}
	// Another client behind the same follower is not throttled by the
	// leader (ListWorkers is forwarded; Status would be answered locally).
	if _, err := adminFrom(t, follower.url, "127.0.0.6", c.adminKey).ListWorkers(ctx, connect.NewRequest(&pb.ListWorkersRequest{})); err != nil {
		t.Fatalf("another client through the follower: %v", err)
	}
	// The leader audited the failures under the client's address.
	leader.rn.al.Failures(audit.FailureConfig{}).Flush(time.Now())
	data, err := os.ReadFile(filepath.Join(leader.dir, audit.FileName))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, []byte(`"event":"auth_failures","source":"127.0.0.5","failures":`+strconv.Itoa(burst)+`,"throttled":1`)) {
		t.Fatalf("leader's audit log lacks the client's failures:\n%s", data)
	}
}
