// Fault tests of a 3-member --peers cluster of real `serve` processes
// (issue 8). Goal: a member whose uncommitted log suffix was cleared (a
// deposed leader: raft logs "clearing log suffix") restarts and holds the
// same state as its peers — hashicorp/raft-wal #31 made such a member panic
// on every later start with "sealed segment has no index block" — and a
// bounded loop of leader pauses, leader kills and follower kills under load
// ends with every member restarted and every acknowledged operation present
// exactly once. Method: build the binary, run three members on loopback,
// drive producers and workers through all three URLs while a ledger records
// what each client was told, inject faults with SIGSTOP/SIGCONT, SIGKILL and
// SIGTERM, then read everything back through a restarted member and compare
// the FSM state hash (Admin.Status state_hash) of every member at one
// applied index. Whether a pause really cleared a suffix depends on where
// the pause lands (between the leader's own log write and its replication),
// so the tests count and log the truncations they observed.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/termivar/distributed/client"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/node"
)

// faultRaftTimeout is the members' --raft-timeout (heartbeat and election).
const faultRaftTimeout = 500 * time.Millisecond

// suffixCleared is what hashicorp/raft logs when it truncates a conflicting
// log tail.
const suffixCleared = "clearing log suffix"

// member is one `serve` process of a procCluster; its stderr and stdout
// go to logPath across restarts.
type member struct {
	id, dir, logPath, url string
	host                  string // address the API and raft listen on
	netns                 string // network namespace to run in ("": the test's own)
	api, raft             int
	cmd                   *exec.Cmd
	exited                chan struct{} // closed when cmd has been waited for
	paused                bool
}

// procCluster is a --peers cluster of real processes. Only the test's
// goroutine starts, stops or signals members.
type procCluster struct {
	t          *testing.T
	bin, base  string
	secretFile string
	peers      string
	members    []*member
	adminKey   string
	mu         sync.Mutex
	clients    []*client.Client
}

func startProcCluster(t *testing.T) *procCluster {
	t.Helper()
	return startProcClusterOf(t, buildBinary(t))
}

// startProcClusterOf is startProcCluster on the binary bin; later
// (re)starts use pc.bin.
func startProcClusterOf(t *testing.T, bin string) *procCluster {
	t.Helper()
	pc := newProcCluster(t, bin)
	var peers []string
	for i := range 3 {
		m := &member{id: fmt.Sprintf("n%d", i+1), api: freePort(t), raft: freePort(t)}
		m.dir = filepath.Join(pc.base, m.id)
		m.logPath = filepath.Join(pc.base, m.id+".log")
		m.host, m.url = "127.0.0.1", "http://127.0.0.1:"+strconv.Itoa(m.api)
		pc.members = append(pc.members, m)
		peers = append(peers, fmt.Sprintf("%s=127.0.0.1:%d", m.id, m.raft))
	}
	pc.startAll(peers)
	return pc
}

// newProcCluster is an empty cluster of processes of bin in a temporary
// base directory, with a random cluster secret file.
func newProcCluster(t *testing.T, bin string) *procCluster {
	t.Helper()
	pc := &procCluster{t: t, bin: bin, base: t.TempDir()}
	pc.secretFile = filepath.Join(pc.base, "cluster.secret")
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pc.secretFile, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	return pc
}

// startAll starts every member with peers (id=raft address), waits until
// each serves and loads the admin key.
func (pc *procCluster) startAll(peers []string) {
	pc.t.Helper()
	pc.peers = strings.Join(peers, ",")
	pc.t.Cleanup(pc.stopAll)
	// NB: a member becomes ready only once a quorum is up: start all first.
	for _, m := range pc.members {
		pc.spawn(m)
	}
	for _, m := range pc.members {
		pc.waitReady(m)
	}
	key, err := client.LoadKey(filepath.Join(pc.members[0].dir, node.AdminKeyFile))
	if err != nil {
		pc.t.Fatal(err)
	}
	pc.adminKey = key
}

// spawn starts m's process without waiting for it to serve.
func (pc *procCluster) spawn(m *member) {
	pc.t.Helper()
	logf, err := os.OpenFile(m.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		pc.t.Fatal(err)
	}
	defer logf.Close()
	args := []string{"serve", "--data-dir", m.dir, "--node-id", m.id,
		"--api-addr", net.JoinHostPort(m.host, strconv.Itoa(m.api)), "--raft-addr", net.JoinHostPort(m.host, strconv.Itoa(m.raft)),
		"--peers", pc.peers, "--cluster-secret-file", pc.secretFile, "--raft-timeout", faultRaftTimeout.String(),
		"--tick", "200ms", "--heartbeat-timeout", "3600", "--max-retries", "32",
		"--max-task-records", "65536", "--max-active-tasks", "16384", "--max-queued-tasks", "16384",
		"--max-terminal-tasks", "65536", "--max-results", "65536"}
	m.cmd = exec.Command(pc.bin, args...)
	if m.netns != "" {
		// NB: `ip netns exec` execs the binary: m.cmd's process is serve's.
		m.cmd = exec.Command("ip", append([]string{"netns", "exec", m.netns, pc.bin}, args...)...)
	}
	m.cmd.Stdout, m.cmd.Stderr = logf, logf
	if err := m.cmd.Start(); err != nil {
		pc.t.Fatal(err)
	}
	m.paused = false
	m.exited = make(chan struct{})
	go func(cmd *exec.Cmd, exited chan struct{}) {
		_ = cmd.Wait()
		close(exited)
	}(m.cmd, m.exited)
}

// waitReady waits until m answers /readyz, failing at once if it exits
// (a member that cannot start again) and after 60 s otherwise.
func (pc *procCluster) waitReady(m *member) {
	pc.t.Helper()
	hc := &http.Client{Timeout: 2 * time.Second}
	defer hc.CloseIdleConnections()
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-m.exited:
			pc.t.Fatalf("%s exited while starting (%v):\n%s", m.id, m.cmd.ProcessState, pc.logTail(m))
		default:
		}
		if resp, err := hc.Get(m.url + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			pc.t.Fatalf("%s not ready after 60 s:\n%s", m.id, pc.logTail(m))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// restart starts a stopped member again and waits until it serves.
func (pc *procCluster) restart(m *member) {
	pc.t.Helper()
	pc.spawn(m)
	pc.waitReady(m)
}

func (pc *procCluster) signal(m *member, sig syscall.Signal) {
	pc.t.Helper()
	if err := m.cmd.Process.Signal(sig); err != nil {
		pc.t.Fatalf("%s: signal %v: %v", m.id, sig, err)
	}
}

// kill9 SIGKILLs m and waits for it.
func (pc *procCluster) kill9(m *member) {
	pc.t.Helper()
	pc.signal(m, syscall.SIGKILL)
	<-m.exited
}

// term SIGTERMs m and requires a clean exit (status 0) within 30 s.
func (pc *procCluster) term(m *member) {
	pc.t.Helper()
	pc.signal(m, syscall.SIGTERM)
	select {
	case <-m.exited:
	case <-time.After(30 * time.Second):
		// NB: SIGQUIT makes the Go runtime write every goroutine's stack
		// to the log before exiting: the hang's diagnosis.
		pc.signal(m, syscall.SIGQUIT)
		<-m.exited
		pc.t.Fatalf("%s did not exit 30 s after SIGTERM (goroutines at SIGQUIT in the log):\n%s", m.id, pc.logTail(m))
	}
	if code := m.cmd.ProcessState.ExitCode(); code != 0 {
		pc.t.Fatalf("%s exited with %d after SIGTERM:\n%s", m.id, code, pc.logTail(m))
	}
}

// stopAll kills whatever still runs and closes the test's clients.
func (pc *procCluster) stopAll() {
	for _, m := range pc.members {
		if m.cmd == nil {
			continue
		}
		select {
		case <-m.exited:
			continue
		default:
		}
		_ = m.cmd.Process.Signal(syscall.SIGCONT)
		_ = m.cmd.Process.Kill()
		<-m.exited
	}
	pc.mu.Lock()
	defer pc.mu.Unlock()
	for _, cl := range pc.clients {
		cl.Close()
	}
}

func (pc *procCluster) logTail(m *member) string {
	b, _ := os.ReadFile(m.logPath)
	if len(b) > 4000 && os.Getenv("TERMIVAR_FAULT_FULL_LOG") == "" {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// truncations counts the suffix truncations m has logged so far.
func (pc *procCluster) truncations(m *member) int {
	b, err := os.ReadFile(m.logPath)
	if err != nil {
		pc.t.Fatal(err)
	}
	return bytes.Count(b, []byte(suffixCleared))
}

// newClient returns a client for urls (comma-separated) that the cluster
// closes at the end.
func (pc *procCluster) newClient(urls, key string, attempts int) *client.Client {
	pc.t.Helper()
	cl, err := client.New(client.Config{ServerURL: urls, Key: key, MaxAttempts: attempts, MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
	if err != nil {
		pc.t.Fatal(err)
	}
	pc.mu.Lock()
	pc.clients = append(pc.clients, cl)
	pc.mu.Unlock()
	return cl
}

// status asks m itself (Status is answered locally), within 2 s.
func (pc *procCluster) status(m *member, hash bool) (*pb.StatusResponse, error) {
	cl, err := client.New(client.Config{ServerURL: m.url, Key: pc.adminKey, MaxAttempts: 1})
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return cl.Status(ctx, &pb.StatusRequest{StateHash: hash})
}

// leader waits for a running, unpaused member that reports itself leader.
func (pc *procCluster) leader() *member {
	pc.t.Helper()
	var l *member
	waitWithin(pc.t, "a leader", 30*time.Second, func() bool {
		for _, m := range pc.members {
			if m.paused || isExited(m) {
				continue
			}
			if st, err := pc.status(m, false); err == nil && st.GetRaftState() == "Leader" && strings.HasPrefix(st.GetLeader(), m.id+"@") {
				l = m
				return true
			}
		}
		return false
	})
	return l
}

func isExited(m *member) bool {
	select {
	case <-m.exited:
		return true
	default:
		return false
	}
}

// newLeaderBesides waits for a leader other than old.
func (pc *procCluster) newLeaderBesides(old *member) *member {
	pc.t.Helper()
	var l *member
	waitWithin(pc.t, "a leader other than "+old.id, 30*time.Second, func() bool {
		l = pc.leader()
		return l != old
	})
	return l
}

// pauseLeader SIGSTOPs the leader until another member leads and has
// committed entries of its own term under load, SIGCONTs it, and waits
// until it follows the new leader and has applied what the leader had
// applied when it was resumed. It returns the paused member and whether it
// logged a suffix truncation meanwhile.
func (pc *procCluster) pauseLeader(l *faultLoad) (*member, bool) {
	pc.t.Helper()
	old := pc.leader()
	before := pc.truncations(old)
	pc.signal(old, syscall.SIGSTOP)
	old.paused = true
	nl := pc.newLeaderBesides(old)
	// NB: the new leader has to write entries at the indexes of the old
	// leader's uncommitted tail for it to conflict; load does that.
	acked := l.acked.Load()
	waitWithin(pc.t, "progress under the new leader", 30*time.Second, func() bool { return l.acked.Load() >= acked+20 })
	pc.signal(old, syscall.SIGCONT)
	old.paused = false
	st, err := pc.status(nl, false)
	if err != nil {
		pc.t.Fatalf("Status of the new leader %s: %v", nl.id, err)
	}
	target := st.GetAppliedIndex()
	waitWithin(pc.t, old.id+" to follow and catch up", 30*time.Second, func() bool {
		s, err := pc.status(old, false)
		return err == nil && s.GetRaftState() == "Follower" && s.GetAppliedIndex() >= target
	})
	return old, pc.truncations(old) > before
}

// follower returns a running member that does not lead, preferring want.
func (pc *procCluster) follower(leader, want *member) *member {
	if want != nil && want != leader && !isExited(want) {
		return want
	}
	for _, m := range pc.members {
		if m != leader && !isExited(m) {
			return m
		}
	}
	pc.t.Fatal("no follower")
	return nil
}

// urlsFrom lists every member's URL starting at member first.
func (pc *procCluster) urlsFrom(first int) string {
	out := make([]string, len(pc.members))
	for i := range pc.members {
		out[i] = pc.members[(first+i)%len(pc.members)].url
	}
	return strings.Join(out, ",")
}

// faultLedger records what clients were told.
type faultLedger struct {
	mu        sync.Mutex
	enqueued  map[string]bool   // acknowledged enqueues
	uncertain map[string]bool   // enqueues without an answer
	completed map[string]string // acknowledged completions → result
}

// Load shape: each producer enqueues faultBatch tasks every
// faultProducerPause plus the call's latency; each worker acquires up to 8
// tasks and completes them one by one.
const (
	faultProducers     = 3
	faultWorkers       = 3
	faultBatch         = 10
	faultProducerPause = 30 * time.Millisecond
)

// faultLoad runs producers and workers against every member.
type faultLoad struct {
	pc               *procCluster
	led              faultLedger
	acked            atomic.Int64 // acknowledged operations
	stopProducers    chan struct{}
	stopWorkers      chan struct{}
	producers, works sync.WaitGroup
	prodKey, workKey string
}

// failoverClient moves to the next member when a call times out: a paused
// member accepts connections but never answers, and the client package
// moves on only on connection errors and Unavailable.
type failoverClient struct {
	pc    *procCluster
	key   string
	first int
	cl    *client.Client
}

func (f *failoverClient) get() *client.Client {
	if f.cl == nil {
		f.cl = f.pc.newClient(f.pc.urlsFrom(f.first), f.key, 3)
	}
	return f.cl
}

func (f *failoverClient) failed(err error) {
	if connect.CodeOf(err) == connect.CodeDeadlineExceeded || errors.Is(err, context.DeadlineExceeded) {
		f.cl.Close()
		f.cl = nil
		f.first++
	}
}

func startFaultLoad(pc *procCluster) *faultLoad {
	pc.t.Helper()
	admin := pc.newClient(pc.urlsFrom(0), pc.adminKey, 20)
	l := &faultLoad{pc: pc, stopProducers: make(chan struct{}), stopWorkers: make(chan struct{}),
		led: faultLedger{enqueued: map[string]bool{}, uncertain: map[string]bool{}, completed: map[string]string{}}}
	for _, k := range []struct {
		role string
		dst  *string
	}{{"producer", &l.prodKey}, {"worker", &l.workKey}} {
		r, err := admin.CreateKey(context.Background(), &pb.CreateKeyRequest{Role: k.role})
		if err != nil {
			pc.t.Fatalf("CreateKey %s: %v", k.role, err)
		}
		*k.dst = r.GetKey()
	}
	for p := range faultProducers {
		l.producers.Go(func() { l.produce(p) })
	}
	for w := range faultWorkers {
		l.works.Go(func() { l.work(w) })
	}
	return l
}

// produce enqueues batches of faultBatch tasks until stopped.
func (l *faultLoad) produce(p int) {
	fc := &failoverClient{pc: l.pc, key: l.prodKey, first: p}
	for n := 0; ; n++ {
		select {
		case <-l.stopProducers:
			return
		case <-time.After(faultProducerPause):
		}
		req := &pb.EnqueueRequest{}
		for k := range faultBatch {
			req.Tasks = append(req.Tasks, &pb.NewTask{TaskId: fmt.Sprintf("p%d-%d-%d", p, n, k), ScanId: "s", TargetRef: "t"})
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := fc.get().Enqueue(ctx, req)
		cancel()
		l.led.mu.Lock()
		for _, tk := range req.GetTasks() {
			if err == nil {
				l.led.enqueued[tk.GetTaskId()] = true
			} else {
				l.led.uncertain[tk.GetTaskId()] = true
			}
		}
		l.led.mu.Unlock()
		if err != nil {
			fc.failed(err)
			continue
		}
		l.acked.Add(1)
	}
}

// work acquires and completes tasks with result "res-<task ID>" until
// stopped. Leases last 5 s, so a task whose completion was lost is
// recovered and acquired again.
func (l *faultLoad) work(w int) {
	fc := &failoverClient{pc: l.pc, key: l.workKey, first: w + 1}
	id := fmt.Sprintf("w%d", w)
	for registered := false; !registered; {
		select {
		case <-l.stopWorkers:
			return
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := fc.get().RegisterWorker(ctx, &pb.RegisterWorkerRequest{WorkerId: id, Capacity: 64})
		cancel()
		registered = err == nil || connect.CodeOf(err) == connect.CodeAlreadyExists
		if !registered {
			fc.failed(err)
		}
	}
	for {
		select {
		case <-l.stopWorkers:
			return
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		ar, err := fc.get().Acquire(ctx, &pb.AcquireRequest{WorkerId: id, WaitSecs: 1, MaxTasks: 8, Start: true, LeaseTtlSecs: 5})
		cancel()
		if err != nil {
			fc.failed(err)
			continue
		}
		for _, lt := range ar.GetTasks() {
			l.complete(fc, lt)
		}
	}
}

func (l *faultLoad) complete(fc *failoverClient, lt *pb.LeasedTask) {
	res := "res-" + lt.GetTaskId()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	_, err := fc.get().Complete(ctx, &pb.CompleteRequest{LeaseToken: lt.GetLeaseToken(), Result: []byte(res)})
	cancel()
	if err != nil {
		fc.failed(err)
		return
	}
	l.led.mu.Lock()
	l.led.completed[lt.GetTaskId()] = res
	l.led.mu.Unlock()
	l.acked.Add(1)
}

// waitProgress waits for n more acknowledged operations.
func (l *faultLoad) waitProgress(what string, n int64) {
	l.pc.t.Helper()
	from := l.acked.Load()
	waitWithin(l.pc.t, what, 60*time.Second, func() bool { return l.acked.Load() >= from+n })
}

// finish stops the producers, lets the workers complete every task that
// exists (reading through via), stops them, and checks the ledger through
// via: every acknowledged enqueue listed once, every acknowledged
// completion completed with its one result, nothing that was never
// enqueued. It returns the number of tasks.
func (l *faultLoad) finish(via *member) int {
	t := l.pc.t
	t.Helper()
	select {
	case <-l.stopProducers:
	default:
		close(l.stopProducers)
	}
	l.producers.Wait()
	reader := l.pc.newClient(via.url, l.pc.adminKey, 50)
	ctx := context.Background()
	waitWithin(t, "every task completed", 90*time.Second, func() bool {
		done, total := 0, 0
		err := reader.EachTask(ctx, &pb.ListTasksRequest{}, func(ti *pb.TaskInfo) error {
			total++
			if ti.GetStatus() == "completed" {
				done++
			}
			return nil
		})
		return err == nil && done == total
	})
	close(l.stopWorkers)
	l.works.Wait()
	seen, results := map[string]int{}, map[string]int{}
	if err := reader.EachTask(ctx, &pb.ListTasksRequest{}, func(ti *pb.TaskInfo) error {
		seen[ti.GetTaskId()]++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := reader.Results(ctx, "s", func(id string, r []byte) error {
		results[id]++
		if want := "res-" + id; string(r) != want {
			return fmt.Errorf("result of %s = %q, want %q", id, r, want)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	l.led.mu.Lock()
	defer l.led.mu.Unlock()
	for id := range l.led.enqueued {
		if seen[id] != 1 {
			t.Errorf("acknowledged enqueue %s listed %d times", id, seen[id])
		}
	}
	for id := range l.led.completed {
		if seen[id] != 1 || results[id] != 1 {
			t.Errorf("acknowledged completion %s: listed %d times, %d results", id, seen[id], results[id])
		}
	}
	for id, n := range seen {
		if n != 1 || results[id] != 1 {
			t.Errorf("task %s listed %d times with %d results", id, n, results[id])
		}
		if !l.led.enqueued[id] && !l.led.uncertain[id] {
			t.Errorf("task %s exists but was never enqueued", id)
		}
	}
	return len(seen)
}

// equalStateHashes writes one more entry (so that a member that restored a
// snapshot and applied nothing since knows its index again), waits until
// every member reports a state hash at the same applied index, and
// requires the hashes to be equal. It returns that index.
func (pc *procCluster) equalStateHashes() uint64 {
	pc.t.Helper()
	return pc.equalStateHashesAfter("marker")
}

// equalStateHashesAfter is equalStateHashes with the one more entry an
// enqueue of task marker (a new ID each call).
func (pc *procCluster) equalStateHashesAfter(marker string) uint64 {
	t := pc.t
	t.Helper()
	admin := pc.newClient(pc.urlsFrom(0), pc.adminKey, 50)
	if _, err := admin.Enqueue(context.Background(), &pb.EnqueueRequest{Tasks: []*pb.NewTask{{TaskId: marker, ScanId: "marker", TargetRef: "t"}}}); err != nil {
		t.Fatalf("marker enqueue: %v", err)
	}
	var index uint64
	waitWithin(t, "every member's state hash at one applied index", 30*time.Second, func() bool {
		var hashes []*pb.StatusResponse
		for _, m := range pc.members {
			st, err := pc.status(m, true)
			if err != nil || st.GetStateHashIndex() == 0 {
				return false
			}
			hashes = append(hashes, st)
		}
		for _, st := range hashes[1:] {
			if st.GetStateHashIndex() != hashes[0].GetStateHashIndex() {
				return false
			}
		}
		for i, st := range hashes[1:] {
			if !bytes.Equal(st.GetStateHash(), hashes[0].GetStateHash()) {
				t.Fatalf("state hashes differ at applied index %d: %s %x, %s %x", st.GetStateHashIndex(),
					pc.members[0].id, hashes[0].GetStateHash(), pc.members[i+1].id, st.GetStateHash())
			}
		}
		index = hashes[0].GetStateHashIndex()
		return true
	})
	return index
}

// TestServe_ClearedSuffixRestarts is the restart regression of raft-wal
// #31: the leader is paused under load until a new leader is elected and
// resumed (its uncommitted tail, if the pause caught one, is cleared), up
// to maxPauses times until the member logs a truncation — without one the
// test fails, since it would prove nothing; then that member is stopped
// with SIGTERM, started again, and must serve: the ledger is read back
// through it and its state hash equals its peers' at one applied index.
//
// Observed: with raft-wal v0.4.1 a truncation was logged on the first pause
// in each of 4 runs, and the test passed in 11–20 s. With v0.4.0 (go get
// github.com/hashicorp/raft-wal@v0.4.0) it failed in both of 2 runs, each
// after a truncation on the second pause: once the restarted member
// panicked in raft.NewRaft ("failed to get log: index=1 error=\"sealed
// segment has no index block\"", exit status 2), once the member did not
// exit within 30 s of SIGTERM after the truncation.
func TestServe_ClearedSuffixRestarts(t *testing.T) {
	// NB: 9 of 10 and 6 of 10 pauses cleared a suffix in two fault loops,
	// so eight misses in a row are not expected.
	const maxPauses = 8
	if testing.Short() {
		t.Skip("builds the binary and runs a 3-process cluster")
	}
	start := time.Now()
	pc := startProcCluster(t)
	l := startFaultLoad(pc)
	l.waitProgress("load before the pause", 50)
	var paused *member
	truncated := false
	pauses := 0
	for pauses < maxPauses && !truncated {
		pauses++
		paused, truncated = pc.pauseLeader(l)
	}
	t.Logf("%s paused %d time(s); suffix truncation observed: %v", paused.id, pauses, truncated)
	if !truncated {
		t.Fatalf("no %q in %d leader pauses: the test did not reach the state it is about", suffixCleared, pauses)
	}
	pc.term(paused)
	pc.restart(paused)
	l.waitProgress("load after the restart", 50)
	tasks := l.finish(paused)
	index := pc.equalStateHashes()
	t.Logf("%d tasks, %d acknowledged operations; state hashes equal on all members at applied index %d; %v",
		tasks, l.acked.Load(), index, time.Since(start).Round(time.Second))
}

// TestServe_FaultLoop is the bounded fault loop of issue 8: under
// continuous load, TERMIVAR_FAULT_ROUNDS rounds (default 10) of {pause the
// leader past the election timeout, then resume it; kill -9 the leader,
// then restart it; kill -9 a follower — the member paused in this round,
// whose suffix may just have been cleared, unless it leads again — then
// restart it}, then SIGTERM and restart every member. It ends with every
// member serving, every acknowledged operation present exactly once (read
// through a restarted member) and equal state hashes on all members.
//
// Observed: with raft-wal v0.4.1, 10 rounds in 55–81 s (-race, load
// average 13 on 2 cores: 81 s), 6–9 of 10 pauses clearing a suffix. With
// v0.4.0 (TERMIVAR_FAULT_ROUNDS=3) it failed in the first round: the
// member restarted after its suffix was cleared panicked with "sealed
// segment has no index block".
func TestServe_FaultLoop(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs a 3-process cluster")
	}
	rounds := 10
	if v, err := strconv.Atoi(os.Getenv("TERMIVAR_FAULT_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	start := time.Now()
	pc := startProcCluster(t)
	l := startFaultLoad(pc)
	l.waitProgress("load before the faults", 50)
	pausesTruncated, restarts := 0, 0
	for r := range rounds {
		paused, truncated := pc.pauseLeader(l)
		if truncated {
			pausesTruncated++
		}
		old := pc.leader()
		pc.kill9(old)
		pc.newLeaderBesides(old)
		pc.restart(old)
		f := pc.follower(pc.leader(), paused)
		pc.kill9(f)
		pc.restart(f)
		restarts += 2
		l.waitProgress(fmt.Sprintf("load after round %d", r+1), 20)
	}
	// The whole cluster stops cleanly and comes back, still under load.
	for _, m := range pc.members {
		pc.term(m)
	}
	for _, m := range pc.members {
		pc.spawn(m)
	}
	for _, m := range pc.members {
		pc.waitReady(m)
	}
	restarts += len(pc.members)
	l.waitProgress("load after the full restart", 20)
	tasks := l.finish(pc.members[0])
	index := pc.equalStateHashes()
	logged := 0
	for _, m := range pc.members {
		logged += pc.truncations(m)
	}
	if logged == 0 {
		t.Errorf("no %q in %d rounds: the loop never restarted a member whose suffix was cleared", suffixCleared, rounds)
	}
	l.led.mu.Lock()
	enq, done := len(l.led.enqueued), len(l.led.completed)
	l.led.mu.Unlock()
	t.Logf("%d rounds, %d restarts, %v: %d acknowledged enqueues, %d acknowledged completions, %d tasks, all present exactly once; "+
		"%d of %d leader pauses cleared a suffix, %d suffix truncations logged in all; state hashes equal at applied index %d",
		rounds, restarts, time.Since(start).Round(time.Second), enq, done, tasks, pausesTruncated, rounds, logged, index)
}
