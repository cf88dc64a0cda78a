package client

import (
	"context"

	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// Membership calls beyond Join, Members and RemoveMember (cluster.go); like
// them they need an admin key of the system tenant.

// TransferLeadership asks the leader (a follower forwards the call) to hand
// leadership to nodeID, or to the most up-to-date voter when nodeID is
// empty, and returns the new leader's ID once the old leader knows it.
// Naming the current leader is a no-op that returns it, so a retry after a
// lost reply is harmless; without nodeID a retry may move leadership again.
func (c *Client) TransferLeadership(ctx context.Context, nodeID string) (string, error) {
	res, err := call(ctx, c, "Cluster.TransferLeadership", &pb.TransferLeadershipRequest{NodeId: nodeID}, c.clusterSvc().TransferLeadership)
	if err != nil {
		return "", err
	}
	return res.GetLeaderId(), nil
}
