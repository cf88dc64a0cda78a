// Tests of `termivar-coord cluster` and of the graceful hand-over. Goal:
// every subcommand works against a real 3-node cluster through a follower
// (transfer-leadership makes the named node lead; add, remove and members
// agree), a non-admin key is refused with exit code 2 and bad arguments
// with exit code 1, each changing nothing; and a leader stopped through
// serve's graceful path hands leadership over before it closes, so writes
// continue without waiting for an election timeout. Method: in-process
// members (startCluster) on loopback; the CLI runs in process (runCLI).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/termivar/distributed/client"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/internal/audit"
	"github.com/termivar/distributed/node"
)

// membersOf runs `cluster members --json` against url and returns the
// members by node ID.
func membersOf(t *testing.T, url, key string) map[string]memberJSON {
	t.Helper()
	code, out, errOut := runCLI(t, url, key, "cluster", "members", "--json")
	if code != exitOK {
		t.Fatalf("cluster members = %d: %s", code, errOut)
	}
	ms := map[string]memberJSON{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var m memberJSON
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("members --json line %q: %v", sc.Text(), err)
		}
		ms[m.NodeID] = m
	}
	return ms
}

func memberIDs(ms map[string]memberJSON) []string {
	var ids []string
	for id := range ms {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// followers returns the live members other than l.
func (c *tcluster) followers(l *tnode) []*tnode {
	var out []*tnode
	for _, n := range c.nodes {
		if n != l && !n.stopped {
			out = append(out, n)
		}
	}
	return out
}

func TestCLI_ClusterMembership(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	leader := c.leader()
	fs := c.followers(leader)
	via := fs[0].url // every change goes through a follower, which forwards it

	ms := membersOf(t, via, c.adminKey)
	if got := memberIDs(ms); !slices.Equal(got, []string{"n1", "n2", "n3"}) {
		t.Fatalf("members = %v", got)
	}
	for id, m := range ms {
		if m.Suffrage != "voter" || m.Leader != (id == leader.id) {
			t.Fatalf("member %s = %+v (leader is %s)", id, m, leader.id)
		}
	}
	code, out, errOut := runCLI(t, via, c.adminKey, "cluster", "members")
	if code != exitOK || !strings.Contains(out, "RAFT ADDRESS") || !strings.Contains(out, leader.rn.n.RaftAddr()) {
		t.Fatalf("cluster members (table) = %d\n%s%s", code, out, errOut)
	}

	// transfer-leadership to a named follower: it leads when the command returns.
	target := fs[1]
	code, out, errOut = runCLI(t, via, c.adminKey, "cluster", "transfer-leadership", "--to", target.id)
	if code != exitOK || strings.TrimSpace(out) != target.id+" now leads" {
		t.Fatalf("transfer-leadership --to %s = %d %q %s", target.id, code, out, errOut)
	}
	if !target.rn.n.IsLeader() || leader.rn.n.IsLeader() {
		t.Fatalf("after transfer-leadership: %s leads %v, %s leads %v", target.id, target.rn.n.IsLeader(), leader.id, leader.rn.n.IsLeader())
	}
	auditLog, err := os.ReadFile(filepath.Join(leader.dir, audit.FileName))
	if err != nil || !strings.Contains(string(auditLog), `"method":"Cluster.TransferLeadership","outcome":"ok"`) {
		t.Fatalf("the old leader's audit log lacks the transfer (%v):\n%s", err, auditLog)
	}
	leader = c.leader()
	if code, _, errOut := runCLI(t, via, c.adminKey, "cluster", "transfer-leadership", "--to", "nope"); code != exitRejected {
		t.Fatalf("transfer-leadership --to nope = %d %s", code, errOut)
	}
	if !leader.rn.n.IsLeader() {
		t.Fatal("a refused transfer moved leadership")
	}

	// add refuses a node that does not answer over raft with the cluster
	// credential (here: a closed port); nothing changes.
	dead := listen(t)
	deadAddr := dead.Addr().String()
	dead.Close()
	code, _, errOut = runCLI(t, via, c.adminKey, "cluster", "add", "n4", deadAddr, "--api-url", "http://n4.invalid:7420")
	if code != exitRejected || !strings.Contains(errOut, "join_unverified") {
		t.Fatalf("cluster add of an unreachable node = %d %s, want %d join_unverified", code, errOut, exitRejected)
	}
	leader = c.leader()
	if got := memberIDs(membersOf(t, leader.url, c.adminKey)); !slices.Equal(got, []string{"n1", "n2", "n3"}) {
		t.Fatalf("after a refused add: members = %v", got)
	}
	if code, _, errOut := runCLI(t, via, c.adminKey, "cluster", "remove", "n9"); code != exitRejected {
		t.Fatalf("cluster remove n9 (unknown) = %d %s", code, errOut)
	}

	checkClusterRefusals(t, c, via)

	// remove a running member, see it gone, add it back (it answers over
	// raft as itself with the credential), see it a voter again, then
	// remove and stop it: members lists the other two.
	var gone *tnode
	for _, n := range c.followers(leader) {
		if n.url != via {
			gone = n
		}
	}
	goneAddr := gone.rn.n.RaftAddr()
	if code, out, errOut := runCLI(t, via, c.adminKey, "cluster", "remove", gone.id, "--json"); code != exitOK || !strings.Contains(out, `"removed":"`+gone.id+`"`) {
		t.Fatalf("cluster remove %s = %d %q %s", gone.id, code, out, errOut)
	}
	leader = c.leader()
	if got := memberIDs(membersOf(t, leader.url, c.adminKey)); len(got) != 2 || slices.Contains(got, gone.id) {
		t.Fatalf("after remove %s: members = %v", gone.id, got)
	}
	code, out, errOut = runCLI(t, via, c.adminKey, "cluster", "add", gone.id, goneAddr, "--api-url", gone.url)
	if code != exitOK || !strings.Contains(out, "added "+gone.id) {
		t.Fatalf("cluster add %s = %d %q %s", gone.id, code, out, errOut)
	}
	leader = c.leader()
	if m, ok := membersOf(t, leader.url, c.adminKey)[gone.id]; !ok || m.RaftAddr != goneAddr || m.Suffrage != "voter" {
		t.Fatalf("after add %s: member = %+v, %v", gone.id, m, ok)
	}
	if code, _, errOut := runCLI(t, via, c.adminKey, "cluster", "remove", gone.id); code != exitOK {
		t.Fatalf("cluster remove %s again = %d %s", gone.id, code, errOut)
	}
	gone.kill()
	leader = c.leader()
	got := memberIDs(membersOf(t, leader.url, c.adminKey))
	if len(got) != 2 || slices.Contains(got, gone.id) {
		t.Fatalf("after remove %s: members = %v", gone.id, got)
	}
}

// checkClusterRefusals: a producer key is refused (2), bad arguments are
// usage errors (1) and a closed port is unreachable (3); the membership
// and the leader stay as they were.
func checkClusterRefusals(t *testing.T, c *tcluster, via string) {
	t.Helper()
	leader := c.leader()
	before := memberIDs(membersOf(t, leader.url, c.adminKey))
	producer := c.createKey(c.client(via, c.adminKey), "producer")
	for _, args := range [][]string{
		{"members"}, {"transfer-leadership"}, {"remove", "n3"}, {"add", "n9", "127.0.0.1:1"},
	} {
		if code, _, errOut := runCLI(t, via, producer, append([]string{"cluster"}, args...)...); code != exitRejected || !strings.Contains(errOut, "permission_denied") {
			t.Errorf("cluster %v with a producer key = %d %s, want %d permission_denied", args, code, errOut, exitRejected)
		}
	}
	for _, args := range [][]string{
		{}, {"bogus"}, {"members", "extra"}, {"members", "--nope"},
		{"add", "n4"}, {"add", "bad id!", "127.0.0.1:1"}, {"add", "n4", "noport"}, {"add", "n4", "127.0.0.1:1", "--api-url", "ftp://x"},
		{"remove"}, {"remove", "a", "b"}, {"remove", "bad id!"},
		{"transfer-leadership", "n2"}, {"transfer-leadership", "--to", "bad id!"},
	} {
		if code, _, errOut := runCLI(t, via, c.adminKey, append([]string{"cluster"}, args...)...); code != exitUsage {
			t.Errorf("cluster %v = %d %s, want %d", args, code, errOut, exitUsage)
		}
	}
	deadLn := listen(t)
	deadURL := "http://" + deadLn.Addr().String()
	deadLn.Close()
	if code, _, errOut := runCLI(t, deadURL, c.adminKey, "--retry-timeout", "300ms", "cluster", "members"); code != exitUnreachable {
		t.Errorf("cluster members against a closed port = %d %s, want %d", code, errOut, exitUnreachable)
	}
	if code, _, errOut := runCLI(t, via, c.adminKey, "cluster", "--help"); code != exitOK || !strings.Contains(errOut, "transfer-leadership [--to NODE_ID]") {
		t.Errorf("cluster --help = %d %s", code, errOut)
	}
	if after := memberIDs(membersOf(t, leader.url, c.adminKey)); !slices.Equal(after, before) || !leader.rn.n.IsLeader() {
		t.Fatalf("refused commands changed the cluster: members %v -> %v, %s leads %v", before, after, leader.id, leader.rn.n.IsLeader())
	}
}

// writeLoop enqueues one task at a time through cl until stop closes and
// records when each acknowledged write returned.
type writeLoop struct {
	mu   sync.Mutex
	acks []time.Time
	done chan struct{}
}

func startWrites(t *testing.T, cl *client.Client, prefix string, stop <-chan struct{}) *writeLoop {
	w := &writeLoop{done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := cl.Enqueue(ctx, &pb.EnqueueRequest{Tasks: []*pb.NewTask{{TaskId: fmt.Sprintf("%s-%d", prefix, i), ScanId: "s", TargetRef: "x"}}})
			cancel()
			if err == nil {
				w.mu.Lock()
				w.acks = append(w.acks, time.Now())
				w.mu.Unlock()
			} else {
				t.Logf("write %d: %v", i, err)
			}
		}
	}()
	return w
}

// count returns the acknowledged writes that returned after since.
func (w *writeLoop) count(since time.Time) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, a := range w.acks {
		if a.After(since) {
			n++
		}
	}
	return n
}

// maxGap is the longest time between two consecutive acknowledged writes
// (the write-unavailability window around the leader's stop).
func (w *writeLoop) maxGap() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var gap time.Duration
	for i := 1; i < len(w.acks); i++ {
		gap = max(gap, w.acks[i].Sub(w.acks[i-1]))
	}
	return gap
}

// stopLeader stops the leader gracefully (serve's SIGTERM path: hand-over,
// HTTP shutdown, node close) or kills it, and reports which other member
// led at the moment the stop returned.
func stopLeader(c *tcluster, l *tnode, graceful bool) (ledAtReturn *tnode) {
	if graceful {
		l.rn.close()
		<-l.served
		l.stopped = true
	} else {
		l.kill()
	}
	for _, n := range c.followers(l) {
		if n.rn.n.IsLeader() {
			return n
		}
	}
	return nil
}

// TestCluster_GracefulLeaderStop stops the leader of a 3-node cluster
// under a steady stream of writes, once through the graceful path and once
// with kill, and reports the longest gap between acknowledged writes of
// each. The graceful stop must have handed leadership over by the time it
// returns (a follower already leads, and a write to it succeeds at its
// first try); the kill is the control in which nobody leads yet.
func TestCluster_GracefulLeaderStop(t *testing.T) {
	t.Parallel()
	gaps := map[bool]time.Duration{}
	for _, graceful := range []bool{true, false} {
		name := map[bool]string{true: "hand-over", false: "kill"}[graceful]
		t.Run(name, func(t *testing.T) {
			c := startCluster(t, 3)
			leader := c.leader()
			waitCond(t, "every member's API URL", func() bool {
				ms, err := leader.rn.n.Members()
				return err == nil && !slices.ContainsFunc(ms, func(m node.Member) bool { return m.APIURL == "" })
			})
			fs := c.followers(leader)
			// The writer talks to a follower that stays up (it forwards to
			// the leader), then to the others.
			cl := c.client(fs[0].url+","+fs[1].url+","+leader.url, c.adminKey)
			stop := make(chan struct{})
			w := startWrites(t, cl, name, stop)
			defer func() { close(stop); <-w.done }()
			waitCond(t, "writes before the stop", func() bool { return w.count(time.Time{}) >= 20 })

			newLeader := stopLeader(c, leader, graceful)
			stoppedAt := time.Now()
			switch {
			case graceful && newLeader == nil:
				t.Fatal("the graceful stop returned before another member led: no hand-over")
			case !graceful && newLeader != nil:
				t.Fatalf("control: %s led right after a kill", newLeader.id)
			}
			if graceful {
				direct, err := client.New(client.Config{ServerURL: newLeader.url, Key: c.adminKey, MaxAttempts: 1})
				if err != nil {
					t.Fatal(err)
				}
				defer direct.Close()
				if _, err := direct.Enqueue(context.Background(), &pb.EnqueueRequest{Tasks: []*pb.NewTask{{TaskId: "right-after", ScanId: "s", TargetRef: "x"}}}); err != nil {
					t.Fatalf("first write to the new leader %s: %v", newLeader.id, err)
				}
			}
			waitCond(t, "writes after the stop", func() bool { return w.count(stoppedAt) >= 20 })
			gaps[graceful] = w.maxGap()
			t.Logf("%s: longest gap between acknowledged writes %v", name, gaps[graceful])
		})
	}
	t.Logf("write-unavailability window: with hand-over %v, with kill (election timeout 500ms) %v", gaps[true], gaps[false])
}
