// Tests of Cluster.TransferLeadership on a single node. Goal: the handler
// refuses non-admin and other-tenant keys, malformed targets and a cluster
// without another voter, changes nothing when it refuses, and audits every
// attempt. The multi-node path (a real transfer through a
// follower) is tested by the CLI's cluster tests.
package server

import (
	"context"
	"os"
	"strings"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/gen/termivar/v1/termivarv1connect"
)

func TestServer_TransferLeadershipRefusals(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.createTenant(t, "acme", nil, nil)
	cluster := func(key string) termivarv1connect.ClusterClient {
		return termivarv1connect.NewClusterClient(b.srv.Client(), b.srv.URL, connect.WithInterceptors(authInterceptor{key}))
	}
	cases := []struct {
		name, key, target string
		code              connect.Code
		kind              string
	}{
		{"producer key", b.createKey(t, "", "producer"), "", connect.CodePermissionDenied, KindPermissionDenied},
		{"admin of another tenant", b.createKey(t, "acme", "admin"), "", connect.CodePermissionDenied, KindPermissionDenied},
		{"no key", "", "", connect.CodeUnauthenticated, KindUnauthenticated},
		{"malformed target", b.adminKey, "bad target!", connect.CodeInvalidArgument, KindInvalidArgument},
		{"no other voter", b.adminKey, "", connect.CodeFailedPrecondition, KindSoleVoter},
		// NB: with no other voter any target is refused the same way; an
		// unknown target of a real cluster answers not_found (CLI tests).
		{"no other voter, named target", b.adminKey, "nope", connect.CodeFailedPrecondition, KindSoleVoter},
	}
	before := b.state(t)
	for _, tc := range cases {
		_, err := cluster(tc.key).TransferLeadership(context.Background(), connect.NewRequest(&pb.TransferLeadershipRequest{NodeId: tc.target}))
		if c, k := errKind(err); c != tc.code || k != tc.kind {
			t.Errorf("%s: TransferLeadership = %v (code %v, kind %q), want %v %q", tc.name, err, c, k, tc.code, tc.kind)
		}
	}
	b.assertUnchanged(t, before, "refused transfers")
	if !b.node.IsLeader() {
		t.Fatal("a refused transfer moved leadership")
	}
	// Naming the leader itself is a no-op that answers with it.
	res, err := cluster(b.adminKey).TransferLeadership(context.Background(), connect.NewRequest(&pb.TransferLeadershipRequest{NodeId: b.node.NodeID()}))
	if err != nil || res.Msg.GetLeaderId() != b.node.NodeID() {
		t.Fatalf("TransferLeadership(self) = %v, %v", res, err)
	}
	data, err := os.ReadFile(b.auditLog)
	if err != nil {
		t.Fatal(err)
	}
	log := string(data)
	for _, want := range []string{`"method":"Cluster.TransferLeadership","outcome":"ok"`, `"method":"Cluster.TransferLeadership","outcome":"permission_denied"`} {
		if !strings.Contains(log, want) {
			t.Errorf("audit log lacks %s:\n%s", want, log)
		}
	}
	// NB: the call without a key is not a per-request line: failed
	// authentications are audited aggregated per source (preauth.go).
	if n := strings.Count(log, "Cluster.TransferLeadership"); n != len(cases) {
		t.Errorf("audit log has %d TransferLeadership lines, want %d (every authenticated call, and the successful one)", n, len(cases))
	}
}
