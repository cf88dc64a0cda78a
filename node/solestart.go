package node

import "github.com/hashicorp/raft"

// A node that is the only voter of its configuration leads alone: raft
// elects it at its first heartbeat timeout, 1–2× RaftTimeout after
// NewRaft (0.3–0.6 s by default), and a restart waited that long for
// nothing (docs/benchmarks.md, "Restart of a 1 M-task node"): no other
// node can lead or needs to be heard from first. campaignIfSoleVoter ends
// the wait through raft's own ReloadConfig: a shorter HeartbeatTimeout
// makes hashicorp/raft's follower loop run its heartbeat check at once,
// and raft, having had no contact from a leader since it started, stands
// for election exactly as it would after the timeout — its own election,
// its own rules (raft's safety never depends on timing; timeouts are
// liveness). The original timeout is restored right away, before the
// check reads it.

// campaignIfSoleVoter makes raft check for a leader now when this node is
// the one voter of raft's latest configuration; otherwise it does nothing.
// A shorter timeout raft refuses (RaftTimeout at raft's 5 ms minimum)
// changes nothing, and the ordinary wait applies.
func campaignIfSoleVoter(r *raft.Raft, local raft.ServerID) {
	if !onlyVoter(r, local) {
		return
	}
	orig := r.ReloadableConfig()
	sooner := orig
	sooner.HeartbeatTimeout-- // any shorter timeout notifies the follower loop
	if r.ReloadConfig(sooner) == nil {
		_ = r.ReloadConfig(orig) // valid: it is the configuration raft ran with
	}
}

// onlyVoter reports whether local is the one voter of r's latest
// configuration.
func onlyVoter(r *raft.Raft, local raft.ServerID) bool {
	f := r.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	voters, self := 0, false
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			voters++
			self = self || s.ID == local
		}
	}
	return voters == 1 && self
}
