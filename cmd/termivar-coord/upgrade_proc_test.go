// Rolling upgrade with a real previous release (issue 16). Goal: a
// 3-member --peers cluster of "previous release" processes (built with
// -tags termivar_prev: cluster version 2, no scheduling) runs under load;
// its members are upgraded one at a time (SIGTERM, then the current
// binary on the same data dir, addresses and flags); the newest operation
// (UpdateScan, cluster version 3) is refused with the typed cluster_version
// error, changing nothing, until every member reports version 3, and is
// accepted once the leader has raised the cluster version; no acknowledged
// enqueue or completion is lost, and every member ends with the same state
// hash at one applied index. Method: procCluster and faultLoad
// (faults_test.go), every wait on an observed event (Status, the load's
// acknowledgements) with a deadline. Then the previous release, started
// on an upgraded member's data dir, exits 2 saying to upgrade rather than
// apply what it does not understand, and the current binary serves that
// data dir again with the same state hash as the others.
package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/termivar/distributed/client"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/internal/wireerr"
	"github.com/termivar/distributed/raftfsm"
)

// prevVersion is the cluster version of a -tags termivar_prev build.
const prevVersion = raftfsm.SupportedVersion - 1

func TestUpgrade_RollingPrevBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two binaries and runs a 3-process cluster")
	}
	prev, cur := buildBinaryTags(t, "termivar_prev"), buildBinary(t)
	start := time.Now()
	pc := startProcClusterOf(t, prev)
	pc.waitVersions("every member on the previous release at its version", prevVersion, prevVersion)
	l := startFaultLoad(pc)
	l.waitProgress("load on the previous release", 30)
	admin := pc.newClient(pc.urlsFrom(0), pc.adminKey, 20)
	pc.expectNewestRefused(admin)

	pc.bin = cur
	for i, m := range pc.members {
		pc.term(m)
		pc.restart(m)
		waitWithin(t, m.id+" to report version "+fmt.Sprint(raftfsm.SupportedVersion), 30*time.Second, func() bool {
			st, err := pc.status(m, false)
			return err == nil && st.GetNodeMaxVersion() == raftfsm.SupportedVersion
		})
		l.waitProgress("load after upgrading "+m.id, 20)
		if i < len(pc.members)-1 {
			pc.expectNewestRefused(admin)
		}
		t.Logf("upgraded %s (%d of %d) at %v", m.id, i+1, len(pc.members), time.Since(start).Round(time.Millisecond))
	}
	pc.waitVersions("the leader to raise the cluster version", raftfsm.SupportedVersion, raftfsm.SupportedVersion)
	if _, err := admin.UpdateScan(context.Background(), &pb.UpdateScanRequest{ScanId: "s", Paused: proto.Bool(false)}); err != nil {
		t.Fatalf("UpdateScan at cluster version %d: %v", raftfsm.SupportedVersion, err)
	}
	l.waitProgress("load at the new cluster version", 20)
	tasks := l.finish(pc.members[0])
	index := pc.equalStateHashes()
	t.Logf("%d tasks, %d acknowledged operations, none lost; state hashes equal at applied index %d; %v from the first start",
		tasks, l.acked.Load(), index, time.Since(start).Round(time.Millisecond))

	// Downgrade: the previous release on an upgraded data dir meets the
	// raise to version 3 (or a state of it) and exits 2 saying to upgrade,
	// instead of applying what it does not understand; the current binary
	// then serves the same data dir again.
	m := pc.members[len(pc.members)-1]
	pc.term(m)
	pc.bin = prev
	before, err := os.ReadFile(m.logPath)
	if err != nil {
		t.Fatal(err)
	}
	pc.spawn(m)
	waitWithin(t, "the previous release to exit on an upgraded data dir", 60*time.Second, func() bool { return isExited(m) })
	after, err := os.ReadFile(m.logPath)
	if err != nil {
		t.Fatal(err)
	}
	if code, log := m.cmd.ProcessState.ExitCode(), string(after[len(before):]); code != exitRejected || !strings.Contains(log, "upgrade") || !strings.Contains(log, "cluster version 3") {
		t.Fatalf("previous release on an upgraded data dir: exit %d (want %d), log:\n%s", code, exitRejected, log)
	}
	for line := range strings.Lines(string(after[len(before):])) {
		if strings.Contains(line, "cluster version 3") && strings.Contains(line, "upgrade") {
			t.Logf("previous release on %s's upgraded data dir: %s", m.id, strings.TrimSpace(line))
			break
		}
	}
	pc.bin = cur
	pc.restart(m)
	pc.equalStateHashesAfter("marker-after-downgrade")
}

// waitVersions waits until every member reports cluster version cluster
// and its binary's version node (Admin.Status, answered by the member).
func (pc *procCluster) waitVersions(what string, cluster, node uint32) {
	pc.t.Helper()
	waitWithin(pc.t, what, 30*time.Second, func() bool {
		for _, m := range pc.members {
			st, err := pc.status(m, false)
			if err != nil || st.GetClusterVersion() != cluster || st.GetNodeMaxVersion() != node && node != 0 {
				return false
			}
		}
		return true
	})
}

// expectNewestRefused requires UpdateScan (the newest operation) to be
// refused with cluster_version, naming the version it needs and that the
// cluster waits for every member, while every member still applies the
// previous cluster version; the refused pause changed nothing (scan s is
// not paused on any member).
func (pc *procCluster) expectNewestRefused(admin *client.Client) {
	pc.t.Helper()
	_, err := admin.UpdateScan(context.Background(), &pb.UpdateScanRequest{ScanId: "s", Paused: proto.Bool(true)})
	d, ok := wireerr.DetailOf(err)
	want := fmt.Sprintf("needs cluster version %d; the cluster runs %d until every member is upgraded", raftfsm.SupportedVersion, prevVersion)
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || !ok || d.GetKind() != "cluster_version" || !strings.Contains(err.Error(), want) {
		pc.t.Fatalf("UpdateScan before every member is upgraded = %v; want FailedPrecondition, cluster_version, %q", err, want)
	}
	for _, m := range pc.members {
		st, err := pc.status(m, false)
		if err != nil {
			pc.t.Fatalf("Status of %s: %v", m.id, err)
		}
		if st.GetClusterVersion() != prevVersion {
			pc.t.Fatalf("%s applies cluster version %d while a member runs the previous release", m.id, st.GetClusterVersion())
		}
		cl := pc.newClient(m.url, pc.adminKey, 20)
		p, err := cl.ScanProgress(context.Background(), &pb.ScanProgressRequest{ScanId: "s"})
		if err != nil || p.GetPaused() {
			pc.t.Fatalf("scan s on %s after the refused pause: paused %v, %v", m.id, p.GetPaused(), err)
		}
	}
}
