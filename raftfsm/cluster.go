package raftfsm

import (
	"bytes"
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

// nodeRecord is one node of the node table.
type nodeRecord struct {
	apiURL string
	// incarnation identifies the node's data dir; once recorded it changes
	// only through removal (an empty api_url), so a wiped member cannot
	// re-register as itself.
	incarnation []byte
	// version is the highest cluster version the node's binary supports
	// (0: not reported; version.go).
	version uint32
}

// MaxIncarnationBytes bounds a node's data dir incarnation.
const MaxIncarnationBytes = 64

// applySetNodeInfo records (or with an empty URL removes) a node's API URL
// and incarnation.
func (f *FSM) applySetNodeInfo(m *pb.SetNodeInfo) Response {
	if !validNodeInfo(m.GetNodeId(), m.GetApiUrl()) || len(m.GetIncarnation()) > MaxIncarnationBytes {
		return Response{Err: fsmErr(KindInvalidCommand, "node info is invalid")}
	}
	if m.GetApiUrl() == "" {
		delete(f.nodes, m.GetNodeId())
		return Response{}
	}
	rec := f.nodes[m.GetNodeId()]
	inc := m.GetIncarnation()
	if len(inc) > 0 && len(rec.incarnation) > 0 && !bytes.Equal(inc, rec.incarnation) {
		return Response{Err: fsmErr(KindInvalidCommand, "node is registered with another data dir incarnation: remove it from the cluster first")}
	}
	if len(inc) > 0 {
		rec.incarnation = bytes.Clone(inc)
	}
	if m.GetMaxVersion() > 0 {
		rec.version = m.GetMaxVersion()
	}
	rec.apiURL = m.GetApiUrl()
	f.nodes[m.GetNodeId()] = rec
	return Response{}
}

// NodeAPIURL returns the advertised API URL of a node, if it registered one.
func (f *FSM) NodeAPIURL(id string) (string, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	r, ok := f.nodes[id]
	return r.apiURL, ok
}

// NodeIncarnation returns the recorded data dir incarnation of a node
// (nil when it registered none).
func (f *FSM) NodeIncarnation(id string) ([]byte, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	r, ok := f.nodes[id]
	return bytes.Clone(r.incarnation), ok
}

// NodeAPIURLs returns a copy of every registered node ID → API URL.
func (f *FSM) NodeAPIURLs() map[string]string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make(map[string]string, len(f.nodes))
	for k, v := range f.nodes {
		out[k] = v.apiURL
	}
	return out
}

// exportNodes returns the node table sorted by ID (caller holds the lock).
func (f *FSM) exportNodes() []*pb.NodeInfo {
	var out []*pb.NodeInfo
	for _, id := range sortedKeys(f.nodes) {
		r := f.nodes[id]
		out = append(out, &pb.NodeInfo{NodeId: id, ApiUrl: r.apiURL, Incarnation: r.incarnation, MaxVersion: r.version})
	}
	return out
}

// restoreNodes validates a snapshot's node table.
func restoreNodes(in []*pb.NodeInfo) (map[string]nodeRecord, bool) {
	out := make(map[string]nodeRecord, len(in))
	for _, n := range in {
		if _, dup := out[n.GetNodeId()]; dup || n.GetApiUrl() == "" || !validNodeInfo(n.GetNodeId(), n.GetApiUrl()) ||
			len(n.GetIncarnation()) > MaxIncarnationBytes {
			return nil, false
		}
		out[n.GetNodeId()] = nodeRecord{apiURL: n.GetApiUrl(), incarnation: bytes.Clone(n.GetIncarnation()), version: n.GetMaxVersion()}
	}
	return out, true
}
