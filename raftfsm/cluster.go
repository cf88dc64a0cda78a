package raftfsm

import (
	"net/url"

	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// Bounds of SetNodeInfo.
const (
	MaxNodeIDBytes = 256
	MaxAPIURLBytes = 1024
)

// validNodeInfo checks a node ID and an API URL ("" allowed: removal).
func validNodeInfo(id, apiURL string) bool {
	if id == "" || len(id) > MaxNodeIDBytes || len(apiURL) > MaxAPIURLBytes {
		return false
	}
	if apiURL == "" {
		return true
	}
	u, err := url.Parse(apiURL)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// applySetNodeInfo records (or with an empty URL removes) a node's API URL.
func (f *FSM) applySetNodeInfo(m *pb.SetNodeInfo) Response {
	if !validNodeInfo(m.GetNodeId(), m.GetApiUrl()) {
		return Response{Err: fsmErr(KindInvalidCommand, "node info is invalid")}
	}
	if m.GetApiUrl() == "" {
		delete(f.nodes, m.GetNodeId())
	} else {
		f.nodes[m.GetNodeId()] = m.GetApiUrl()
	}
	return Response{}
}

// NodeAPIURL returns the advertised API URL of a node, if it registered one.
func (f *FSM) NodeAPIURL(id string) (string, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	u, ok := f.nodes[id]
	return u, ok
}

// NodeAPIURLs returns a copy of every registered node ID → API URL.
func (f *FSM) NodeAPIURLs() map[string]string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make(map[string]string, len(f.nodes))
	for k, v := range f.nodes {
		out[k] = v
	}
	return out
}

// exportNodes returns the node table sorted by ID (caller holds the lock).
func (f *FSM) exportNodes() []*pb.NodeInfo {
	var out []*pb.NodeInfo
	for _, id := range sortedKeys(f.nodes) {
		out = append(out, &pb.NodeInfo{NodeId: id, ApiUrl: f.nodes[id]})
	}
	return out
}

// restoreNodes validates a snapshot's node table.
func restoreNodes(in []*pb.NodeInfo) (map[string]string, bool) {
	out := make(map[string]string, len(in))
	for _, n := range in {
		if _, dup := out[n.GetNodeId()]; dup || n.GetApiUrl() == "" || !validNodeInfo(n.GetNodeId(), n.GetApiUrl()) {
			return nil, false
		}
		out[n.GetNodeId()] = n.GetApiUrl()
	}
	return out, true
}
