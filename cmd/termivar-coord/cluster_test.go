// Multi-node tests on loopback: in-process `serve` nodes (startNode) on temp
// dirs and port-0 listeners. TestCluster_StaticThreeNodes checks --peers,
// forwarding and shared tokens; TestCluster_LeaderFailover kills the leader
// under concurrent producers and workers and checks that nothing
// acknowledged is lost or doubled; TestCluster_Linearizable records a
// history across a leader change and checks it with porcupine;
// TestCluster_JoinFourthNode adds a node with --join.
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/anishathalye/porcupine"

	distributed "github.com/termivar/distributed"
	"github.com/termivar/distributed/client"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/node"
	"github.com/termivar/distributed/raftfsm"
)

// tnode is one in-process cluster member.
type tnode struct {
	id, dir, url string
	rn           *runningNode
	served       chan struct{}
	stopped      bool
	flags        serveFlags // the flags it was started with
}

type tcluster struct {
	t          *testing.T
	base       string
	secretFile string
	nodes      []*tnode
	adminKey   string
	mu         sync.Mutex
	clients    []*client.Client
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// nodeFlags are serve's defaults for a test member.
func nodeFlags(t *testing.T, dir, id string, apiLn, raftLn net.Listener) serveFlags {
	t.Helper()
	var f serveFlags
	if err := newServeFlagSet(&f).Parse(nil); err != nil {
		t.Fatal(err)
	}
	f.dataDir, f.nodeID = dir, id
	f.apiAddr, f.raftAddr = apiLn.Addr().String(), raftLn.Addr().String()
	f.tick = 200 * time.Millisecond
	f.cluster.apiListener, f.cluster.raftListener = apiLn, raftLn
	f.cluster.raftLog = io.Discard
	// NB: short raft timeouts keep failover quick; they are still several
	// times the loopback round trip on a loaded 2-core machine under -race.
	f.cluster.raftTimeout = 500 * time.Millisecond
	return f
}

// start runs startNode (which returns once the node is ready) and serves.
func (n *tnode) start(ctx context.Context, f serveFlags) error {
	rn, err := startNode(ctx, f, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	n.rn, n.url = rn, rn.url
	n.served = make(chan struct{})
	go func() {
		defer close(n.served)
		_ = rn.hs.Serve(rn.ln)
	}()
	return nil
}

// kill stops the node hard: connections dropped, raft shut down without
// handing over leadership.
func (n *tnode) kill() {
	if n.stopped || n.rn == nil {
		return
	}
	n.stopped = true
	_ = n.rn.hs.Close()
	n.rn.n.Close()
	n.rn.srv.CloseIdleConnections()
	n.rn.al.Close()
	<-n.served
}

// startCluster starts size members bootstrapped with --peers and a shared
// --cluster-secret-file.
func startCluster(t *testing.T, size int) *tcluster {
	t.Helper()
	return startClusterWith(t, size, nil)
}

// startClusterWith is startCluster with mut applied to member i's flags
// (nil: none).
func startClusterWith(t *testing.T, size int, mut func(i int, f *serveFlags)) *tcluster {
	t.Helper()
	c := &tcluster{t: t, base: t.TempDir()}
	c.secretFile = filepath.Join(c.base, "cluster.secret")
	secret := make([]byte, 32)
	for i := range secret {
		secret[i] = byte(rand.N(256))
	}
	if err := os.WriteFile(c.secretFile, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	apiLns, raftLns := make([]net.Listener, size), make([]net.Listener, size)
	var peers []string
	for i := range size {
		apiLns[i], raftLns[i] = listen(t), listen(t)
		peers = append(peers, fmt.Sprintf("n%d=%s", i+1, raftLns[i].Addr()))
	}
	t.Cleanup(c.stop)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for i := range size {
		n := &tnode{id: fmt.Sprintf("n%d", i+1), dir: filepath.Join(c.base, fmt.Sprintf("n%d", i+1))}
		c.nodes = append(c.nodes, n)
		f := nodeFlags(t, n.dir, n.id, apiLns[i], raftLns[i])
		f.cluster.peers = strings.Join(peers, ",")
		f.cluster.secretFile = c.secretFile
		if mut != nil {
			mut(i, &f)
		}
		n.flags = f
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			errs[i] = n.start(ctx, f)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("start %s: %v", c.nodes[i].id, err)
		}
	}
	key, err := client.LoadKey(filepath.Join(c.nodes[0].dir, node.AdminKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	c.adminKey = key
	return c
}

func (c *tcluster) stop() {
	c.mu.Lock()
	for _, cl := range c.clients {
		cl.Close()
	}
	c.mu.Unlock()
	for _, n := range c.nodes {
		n.kill()
	}
}

// urls lists the live members' URLs starting at member first.
func (c *tcluster) urls(first int) string {
	var out []string
	for i := range c.nodes {
		n := c.nodes[(first+i)%len(c.nodes)]
		if !n.stopped {
			out = append(out, n.url)
		}
	}
	return strings.Join(out, ",")
}

func (c *tcluster) client(serverURL, key string) *client.Client {
	c.t.Helper()
	cl, err := client.New(client.Config{ServerURL: serverURL, Key: key, MaxAttempts: 200, MinBackoff: 20 * time.Millisecond, MaxBackoff: 250 * time.Millisecond})
	if err != nil {
		c.t.Fatal(err)
	}
	c.mu.Lock()
	c.clients = append(c.clients, cl)
	c.mu.Unlock()
	return cl
}

// leader waits for a live member that leads with its URL replicated.
func (c *tcluster) leader() *tnode {
	c.t.Helper()
	var l *tnode
	waitCond(c.t, "a leader", func() bool {
		for _, n := range c.nodes {
			if !n.stopped && n.rn.n.IsLeader() && n.rn.n.LeaderAPIURL() == n.url {
				l = n
				return true
			}
		}
		return false
	})
	return l
}

func waitCond(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waitWithin(t, what, 25*time.Second, cond)
}

// waitWithin polls cond every 20 ms until it holds, failing tb when it
// does not within d: the one poll loop of this package's tests.
func waitWithin(tb testing.TB, what string, d time.Duration, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s (%v)", what, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// skipper is the part of testing.TB requireOrSkip uses.
type skipper interface {
	Helper()
	Fatal(args ...any)
	Skip(args ...any)
}

// requireOrSkip returns path, or, when missing says why a test's outside
// tool is absent, skips the test, or fails it when the environment
// variable require is "1" (.ci/run sets it for the browser, the shells and
// the network namespaces): the one gate of this package's tests that need
// something outside Go.
func requireOrSkip(t skipper, require, path, missing string) string {
	t.Helper()
	switch {
	case missing == "":
		return path
	case os.Getenv(require) == "1":
		t.Fatal(missing + ", and " + require + "=1 forbids skipping")
	}
	t.Skip(missing)
	return ""
}

// createKey creates a key with role through cl. NB: CreateKey is not safe
// to replay, so a client does not re-send it after an unknown outcome (a
// leader that lost leadership with the entry appended answers Unavailable
// with Termivar-Outcome: unknown; spurious elections happen under load);
// a second key is harmless here, so it is created again.
func (c *tcluster) createKey(cl *client.Client, role string) string {
	c.t.Helper()
	var key string
	waitCond(c.t, "CreateKey "+role, func() bool {
		r, err := cl.CreateKey(context.Background(), &pb.CreateKeyRequest{Role: role})
		if err != nil && !client.MayHaveApplied(err) {
			c.t.Fatalf("CreateKey %s: %v", role, err)
		}
		key = r.GetKey()
		return err == nil
	})
	return key
}

func codeOf(err error) connect.Code { return connect.CodeOf(err) }

func TestCluster_StaticThreeNodes(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Every member derived the same first admin key and holds the secret.
	for _, n := range c.nodes {
		k, err := client.LoadKey(filepath.Join(n.dir, node.AdminKeyFile))
		if err != nil || k != c.adminKey {
			t.Fatalf("%s admin.key = %q, %v; want the key of n1", n.id, k, err)
		}
		st, err := os.Stat(filepath.Join(n.dir, node.SecretFile))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s cluster.secret: %v, %v", n.id, st, err)
		}
	}
	leader := c.leader()
	// Tokens sealed by one member open on every other.
	var lease distributed.TaskLease
	for _, a := range c.nodes {
		fence := a.rn.n.Codec().SealLease(raftfsm.SystemTenant, lease)
		for _, b := range c.nodes {
			if _, _, err := b.rn.n.Codec().Open(raftfsm.SystemTenant, fence); err != nil {
				t.Fatalf("token of %s does not open on %s: %v", a.id, b.id, err)
			}
		}
	}
	// Writes and reads through every member (followers forward).
	for i, n := range c.nodes {
		cl := c.client(n.url, c.adminKey)
		id := fmt.Sprintf("via-%s", n.id)
		er, err := cl.Enqueue(ctx, &pb.EnqueueRequest{Tasks: []*pb.NewTask{{TaskId: id, ScanId: "s", TargetRef: "t"}}})
		if err != nil {
			t.Fatalf("Enqueue via %s: %v", n.id, err)
		}
		for _, m := range c.nodes {
			g, err := c.client(m.url, c.adminKey).GetTask(ctx, &pb.GetTaskRequest{TaskId: id})
			if err != nil || g.GetTask().GetStatus() != "queued" {
				t.Fatalf("GetTask(%s) via %s = %v, %v", id, m.id, g, err)
			}
		}
		// A fence token minted (by the leader) for a request through member
		// i cancels through member i+1.
		next := c.client(c.nodes[(i+1)%3].url, c.adminKey)
		if _, err := next.Cancel(ctx, &pb.CancelRequest{OwnershipToken: er.GetTasks()[0].GetFenceToken()}); err != nil {
			t.Fatalf("Cancel via the next member: %v", err)
		}
		st, err := cl.Status(ctx, &pb.StatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if st.GetNodeId() != n.id || len(st.GetMembers()) != 3 || !strings.HasPrefix(st.GetLeader(), leader.id+"@") {
			t.Fatalf("Status via %s = node %s leader %s members %d", n.id, st.GetNodeId(), st.GetLeader(), len(st.GetMembers()))
		}
		ms, err := cl.Members(ctx, &pb.MembersRequest{})
		if err != nil || len(ms.GetMembers()) != 3 || ms.GetLeaderId() != leader.id {
			t.Fatalf("Members via %s = %v, %v", n.id, ms, err)
		}
	}
	// A producer key created through a follower works on every member; a
	// producer may not call Cluster.
	var follower *tnode
	for _, n := range c.nodes {
		if n != leader {
			follower = n
		}
	}
	prod := c.createKey(c.client(follower.url, c.adminKey), "producer")
	for _, n := range c.nodes {
		if _, err := c.client(n.url, prod).GetTask(ctx, &pb.GetTaskRequest{TaskId: "via-n1"}); err != nil {
			t.Fatalf("producer key via %s: %v", n.id, err)
		}
	}
	if _, err := c.client(follower.url, prod).Members(ctx, &pb.MembersRequest{}); codeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("producer Members = %v, want PermissionDenied", err)
	}
	// Followers register their own API URLs through the leader.
	waitCond(t, "every member's API URL", func() bool {
		ms, err := c.client(follower.url, c.adminKey).Members(ctx, &pb.MembersRequest{})
		if err != nil {
			return false
		}
		for i, m := range ms.GetMembers() {
			if m.GetApiUrl() != c.nodes[i].url {
				return false
			}
		}
		return true
	})
}

// clusterLedger records what the cluster acknowledged.
type clusterLedger struct {
	mu        sync.Mutex
	enqueued  map[string]bool   // acknowledged enqueues
	uncertain map[string]bool   // enqueues whose outcome the client never learned
	completed map[string]string // acknowledged completions → result
}

func TestCluster_LeaderFailover(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	admin := c.client(c.urls(0), c.adminKey)
	prodKey, workKey := c.createKey(admin, "producer"), c.createKey(admin, "worker")
	led := &clusterLedger{enqueued: map[string]bool{}, uncertain: map[string]bool{}, completed: map[string]string{}}
	count := func() (int, int) {
		led.mu.Lock()
		defer led.mu.Unlock()
		return len(led.enqueued), len(led.completed)
	}

	stopProducers := make(chan struct{})
	var producers sync.WaitGroup
	for p := range 3 {
		cl := c.client(c.urls(p), prodKey)
		producers.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stopProducers:
					return
				default:
				}
				var tasks []*pb.NewTask
				for j := range 4 {
					tasks = append(tasks, &pb.NewTask{TaskId: fmt.Sprintf("p%d-%d-%d", p, i, j), ScanId: "s", TargetRef: "x"})
				}
				_, err := cl.Enqueue(ctx, &pb.EnqueueRequest{Tasks: tasks})
				led.mu.Lock()
				for _, tk := range tasks {
					if err == nil {
						led.enqueued[tk.GetTaskId()] = true
					} else {
						led.uncertain[tk.GetTaskId()] = true
					}
				}
				led.mu.Unlock()
				if err != nil && ctx.Err() != nil {
					return
				}
			}
		})
	}
	wctx, stopWorkers := context.WithCancel(ctx)
	var workers sync.WaitGroup
	var workerErrs atomic.Int64
	for w := range 3 {
		cl := c.client(c.urls(w), workKey)
		workers.Go(func() {
			id := fmt.Sprintf("w%d", w)
			// The leader may be killed while a registration is forwarded to
			// it: the answer is then unavailable with an unknown outcome
			// (RegisterWorker is not replayed by the client), and a second
			// try finds the worker registered or registers it.
			for {
				_, err := cl.RegisterWorker(wctx, &pb.RegisterWorkerRequest{WorkerId: id, Capacity: 16})
				if err == nil || codeOf(err) == connect.CodeAlreadyExists {
					break
				}
				if codeOf(err) != connect.CodeUnavailable || wctx.Err() != nil {
					t.Errorf("RegisterWorker %s: %v", id, err)
					return
				}
			}
			for wctx.Err() == nil {
				ar, err := cl.Acquire(wctx, &pb.AcquireRequest{WorkerId: id, WaitSecs: 1, MaxTasks: 8, Start: true, LeaseTtlSecs: 3})
				if err != nil {
					workerErrs.Add(1)
					continue
				}
				for _, lt := range ar.GetTasks() {
					res := "result-" + lt.GetTaskId()
					_, err := cl.Complete(wctx, &pb.CompleteRequest{LeaseToken: lt.GetLeaseToken(), Result: []byte(res)})
					if err != nil {
						workerErrs.Add(1)
						continue
					}
					led.mu.Lock()
					led.completed[lt.GetTaskId()] = res
					led.mu.Unlock()
				}
			}
		})
	}

	waitCond(t, "progress before the failover", func() bool { e, d := count(); return e >= 60 && d >= 20 })
	old := c.leader()
	e0, d0 := count()
	old.kill()
	t.Logf("killed leader %s after %d enqueues and %d completions", old.id, e0, d0)
	nl := c.leader()
	t.Logf("new leader %s", nl.id)
	waitCond(t, "progress after the failover", func() bool { e, d := count(); return e >= e0+60 && d >= d0+20 })
	close(stopProducers)
	producers.Wait()

	// Drain: every task that exists completes.
	reader := c.client(c.urls(0), c.adminKey)
	waitCond(t, "every task completed", func() bool {
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
	stopWorkers()
	workers.Wait()

	seen := map[string]int{}
	if err := reader.EachTask(ctx, &pb.ListTasksRequest{}, func(ti *pb.TaskInfo) error {
		seen[ti.GetTaskId()]++
		if !ti.GetHasResult() {
			return fmt.Errorf("task %s has no result", ti.GetTaskId())
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	results := map[string]int{}
	if err := reader.Results(ctx, "s", func(id string, r []byte) error {
		results[id]++
		if want := "result-" + id; string(r) != want {
			return fmt.Errorf("result of %s = %q", id, r)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	led.mu.Lock()
	defer led.mu.Unlock()
	for id := range led.enqueued {
		if seen[id] != 1 {
			t.Errorf("acknowledged enqueue %s listed %d times", id, seen[id])
		}
	}
	for id, res := range led.completed {
		if seen[id] != 1 || results[id] != 1 {
			t.Errorf("acknowledged completion %s (%s): listed %d, results %d", id, res, seen[id], results[id])
		}
	}
	for id, n := range seen {
		if n != 1 || results[id] != 1 {
			t.Errorf("task %s listed %d times with %d results", id, n, results[id])
		}
		if !led.enqueued[id] && !led.uncertain[id] {
			t.Errorf("task %s exists but was never enqueued", id)
		}
	}
	t.Logf("%d acknowledged enqueues (%d uncertain), %d acknowledged completions, %d tasks, %d retried worker calls",
		len(led.enqueued), len(led.uncertain), len(led.completed), len(seen), workerErrs.Load())
}

// Linearizability model: per task ID, 0 absent, 1 active (queued, leased
// or running), 2 completed.
type linInput struct {
	op  string // enqueue, get, complete
	key string
}

type linOutput struct {
	kind string // ok, exists, absent, active, completed, failed, unknown
	// err describes the call's error (code, kind, message) for the
	// failure output; the model ignores it.
	err string
}

var linModel = porcupine.NondeterministicModel{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range h {
			k := op.Input.(linInput).key
			if _, ok := by[k]; !ok {
				keys = append(keys, k)
			}
			by[k] = append(by[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, by[k])
		}
		return out
	},
	Init: func() []any { return []any{0} },
	Step: func(state, input, output any) []any {
		s, in, out := state.(int), input.(linInput), output.(linOutput)
		switch in.op {
		case "enqueue":
			switch out.kind {
			case "ok":
				if s == 0 {
					return []any{1}
				}
			case "exists":
				// NB: a retried Enqueue whose first attempt took effect
				// answers task_already_exists about its own task, so
				// "exists" only says the task exists afterwards.
				if s == 0 {
					return []any{1}
				}
				return []any{s}
			case "unknown":
				if s == 0 {
					return []any{0, 1}
				}
				return []any{s}
			}
		case "get":
			switch out.kind {
			case "absent":
				if s == 0 {
					return []any{0}
				}
			case "active":
				if s == 1 {
					return []any{1}
				}
			case "completed":
				if s == 2 {
					return []any{2}
				}
			case "unknown":
				return []any{s}
			}
		case "complete":
			switch out.kind {
			case "ok":
				if s == 1 {
					return []any{2}
				}
			case "failed":
				return []any{s}
			case "unknown":
				if s == 1 {
					return []any{1, 2}
				}
				return []any{s}
			}
		}
		return nil
	},
	DescribeOperation: func(in, out any) string {
		o := out.(linOutput)
		if o.err != "" {
			return fmt.Sprintf("%s(%s) -> %s [%s]", in.(linInput).op, in.(linInput).key, o.kind, o.err)
		}
		return fmt.Sprintf("%s(%s) -> %s", in.(linInput).op, in.(linInput).key, o.kind)
	},
}

// history records operations with monotonic timestamps.
type history struct {
	mu    sync.Mutex
	start time.Time
	ops   []porcupine.Operation
}

func (h *history) now() int64 { return int64(time.Since(h.start)) }

func (h *history) add(client int, in linInput, call int64, out linOutput) {
	ret := h.now()
	if out.kind == "unknown" {
		// NB: an operation whose outcome is unknown may take effect any
		// time later: it never returns.
		ret = math.MaxInt64
	}
	h.mu.Lock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
	h.mu.Unlock()
}

func TestCluster_Linearizable(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin := c.client(c.urls(0), c.adminKey)
	prodKey, workKey := c.createKey(admin, "producer"), c.createKey(admin, "worker")
	l := startLinLoad(ctx, t, func(first int, key string) *client.Client { return c.client(c.urls(first), key) }, prodKey, workKey)
	waitCond(t, "operations before the failover", func() bool { return l.ops.Load() >= 150 })
	old := c.leader()
	before := l.ops.Load()
	old.kill()
	nl := c.leader()
	waitCond(t, "operations after the failover", func() bool { return l.ops.Load() >= before+150 })
	l.halt()
	checkLinearizable(t, l.h, fmt.Sprintf("leader %s → %s", old.id, nl.id))
}

// linKeys is the number of task IDs the linearizability workload uses.
const linKeys = 24

// linLoad is the workload of the linearizability tests: 4 producers
// enqueue and read random keys among linKeys, 2 workers acquire (600 s
// leases) and complete them, and every call goes into h.
type linLoad struct {
	h    *history
	stop chan struct{}
	wg   sync.WaitGroup
	ops  atomic.Int64
	ctx  context.Context
}

// startLinLoad starts the workload; newClient(first, key) returns a client
// whose URL list starts at member first (producers 0–3, workers 1–2).
func startLinLoad(ctx context.Context, t *testing.T, newClient func(first int, key string) *client.Client, prodKey, workKey string) *linLoad {
	l := &linLoad{h: &history{start: time.Now()}, stop: make(chan struct{}), ctx: ctx}
	for p := range 4 {
		cl := newClient(p, prodKey)
		l.wg.Go(func() { l.produce(p, cl) })
	}
	for w := range 2 {
		cl := newClient(w+1, workKey)
		l.wg.Go(func() { l.work(t, w, cl) })
	}
	return l
}

// callCtx times out one call so that a call stuck across a failover or a
// partition becomes an unknown outcome instead of stalling the load.
func (l *linLoad) callCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(l.ctx, 8*time.Second)
}

func (l *linLoad) stopped() bool {
	select {
	case <-l.stop:
		return true
	default:
		return false
	}
}

// halt stops the load and waits for its calls to return.
func (l *linLoad) halt() {
	close(l.stop)
	l.wg.Wait()
}

func (l *linLoad) produce(p int, cl *client.Client) {
	for !l.stopped() {
		k := fmt.Sprintf("k%02d", rand.N(linKeys))
		if rand.N(3) == 0 {
			l.enqueue(p, cl, k)
		} else {
			l.get(p, cl, k)
		}
		l.ops.Add(1)
	}
}

func (l *linLoad) enqueue(p int, cl *client.Client, k string) {
	cctx, cancel := l.callCtx()
	defer cancel()
	call := l.h.now()
	_, err := cl.Enqueue(cctx, &pb.EnqueueRequest{Tasks: []*pb.NewTask{{TaskId: k, ScanId: "s", TargetRef: "x"}}})
	out := linOutput{kind: "ok", err: describeErr(err)}
	switch {
	case err == nil:
	case client.KindOf(err) == distributed.KindTaskAlreadyExists.String():
		out.kind = "exists"
	default:
		out.kind = "unknown"
	}
	l.h.add(p, linInput{"enqueue", k}, call, out)
}

// get reads k and records the outcome as client p.
func (l *linLoad) get(p int, cl *client.Client, k string) {
	cctx, cancel := l.callCtx()
	defer cancel()
	call := l.h.now()
	g, err := cl.GetTask(cctx, &pb.GetTaskRequest{TaskId: k})
	out := linOutput{kind: "unknown", err: describeErr(err)}
	switch {
	case err == nil && g.GetTask().GetStatus() == "completed":
		out.kind = "completed"
	case err == nil:
		out.kind = "active"
	case client.KindOf(err) == distributed.KindTaskNotFound.String():
		out.kind = "absent"
	}
	l.h.add(p, linInput{"get", k}, call, out)
}

func (l *linLoad) work(t *testing.T, w int, cl *client.Client) {
	id := fmt.Sprintf("lw%d", w)
	for registered := false; !registered; {
		if l.stopped() {
			return
		}
		cctx, cancel := l.callCtx()
		_, err := cl.RegisterWorker(cctx, &pb.RegisterWorkerRequest{WorkerId: id, Capacity: 4})
		cancel()
		registered = err == nil || codeOf(err) == connect.CodeAlreadyExists
		if !registered && l.ctx.Err() != nil {
			t.Errorf("RegisterWorker: %v", err)
			return
		}
	}
	for !l.stopped() {
		cctx, cancel := l.callCtx()
		// NB: a long lease keeps recovery out of the model (no lease
		// expires while the test runs).
		ar, err := cl.Acquire(cctx, &pb.AcquireRequest{WorkerId: id, WaitSecs: 1, MaxTasks: 1, Start: true, LeaseTtlSecs: 600})
		cancel()
		if err != nil {
			continue
		}
		for _, lt := range ar.GetTasks() {
			l.complete(w, cl, lt)
		}
	}
}

func (l *linLoad) complete(w int, cl *client.Client, lt *pb.LeasedTask) {
	cctx, cancel := l.callCtx()
	defer cancel()
	call := l.h.now()
	_, err := cl.Complete(cctx, &pb.CompleteRequest{LeaseToken: lt.GetLeaseToken(), Result: []byte("r")})
	out := linOutput{kind: "ok", err: describeErr(err)}
	if err != nil {
		out.kind = "unknown"
		if ce := codeOf(err); ce != connect.CodeUnavailable && ce != connect.CodeDeadlineExceeded && ce != connect.CodeCanceled {
			out.kind = "failed"
		}
	}
	l.h.add(10+w, linInput{"complete", lt.GetTaskId()}, call, out)
	l.ops.Add(1)
}

// describeErr is err's code, error kind and message for a failure
// output ("" for nil), so that a history that fails shows why each call
// failed.
func describeErr(err error) string {
	if err == nil {
		return ""
	}
	return fmt.Sprintf("%s/%s: %v", codeOf(err), client.KindOf(err), err)
}

// checkLinearizable checks h with porcupine and fails the test with the
// failing keys' operations if it is not linearizable.
func checkLinearizable(t *testing.T, h *history, label string) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	unknown := 0
	failed := map[string]int{} // "op -> outcome [code/kind: message]" of failed calls
	for _, op := range h.ops {
		out := op.Output.(linOutput)
		if out.kind == "unknown" {
			unknown++
		}
		if out.err != "" && out.kind != "absent" && out.kind != "exists" {
			failed[fmt.Sprintf("%s -> %s [%s]", op.Input.(linInput).op, out.kind, out.err)]++
		}
	}
	res := porcupine.CheckOperationsTimeout(linModel.ToModel(), h.ops, 20*time.Second)
	t.Logf("%s; %d operations (%d with unknown outcome): %s; failed calls: %v", label, len(h.ops), unknown, res, failed)
	if res == porcupine.Illegal {
		var b strings.Builder
		for _, part := range linModel.Partition(h.ops) {
			if porcupine.CheckOperations(linModel.ToModel(), part) {
				continue
			}
			for _, op := range part {
				fmt.Fprintf(&b, "[%d,%d] c%d %s\n", op.Call, op.Return, op.ClientId, linModel.DescribeOperation(op.Input, op.Output))
			}
		}
		t.Fatalf("history is not linearizable; failing keys:\n%s", b.String())
	}
}

func TestCluster_JoinFourthNode(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin := c.client(c.urls(0), c.adminKey)
	var tasks []*pb.NewTask
	for i := range 50 {
		tasks = append(tasks, &pb.NewTask{TaskId: fmt.Sprintf("before-%d", i), ScanId: "s", TargetRef: "x"})
	}
	enqueueFresh(ctx, t, admin, tasks)
	leader := c.leader()
	if err := leader.rn.n.Snapshot(); err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	var via *tnode
	for _, n := range c.nodes {
		if n != leader {
			via = n // join through a follower: it forwards to the leader
		}
	}
	n4 := &tnode{id: "n4", dir: filepath.Join(c.base, "n4")}
	f := nodeFlags(t, n4.dir, n4.id, listen(t), listen(t))
	f.cluster.join = via.url
	f.cluster.joinKey = c.adminKey
	c.nodes = append(c.nodes, n4)
	if err := n4.start(ctx, f); err != nil {
		t.Fatalf("join: %v", err)
	}
	secret, _ := os.ReadFile(c.secretFile)
	got, err := os.ReadFile(filepath.Join(n4.dir, node.SecretFile))
	if st, serr := os.Stat(filepath.Join(n4.dir, node.SecretFile)); err != nil || !bytes.Equal(got, secret) || serr != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("joiner's cluster.secret: equal %v, %v", bytes.Equal(got, secret), err)
	}
	if k, err := client.LoadKey(filepath.Join(n4.dir, node.AdminKeyFile)); err != nil || k != c.adminKey {
		t.Fatalf("joiner's admin.key = %q, %v", k, err)
	}
	waitCond(t, "the joiner to catch up", func() bool {
		tv, ok := n4.rn.n.FSM().Tenant(raftfsm.SystemTenant)
		return ok && tv.Counters().TaskRecords == 50
	})
	c4 := c.client(n4.url, c.adminKey)
	enqueueFresh(ctx, t, c4, []*pb.NewTask{{TaskId: "after", ScanId: "s", TargetRef: "x"}})
	if g, err := c4.GetTask(ctx, &pb.GetTaskRequest{TaskId: "before-7"}); err != nil || g.GetTask().GetStatus() != "queued" {
		t.Fatalf("GetTask via the joiner = %v, %v", g, err)
	}
	ms, err := c4.Members(ctx, &pb.MembersRequest{})
	if err != nil || len(ms.GetMembers()) != 4 {
		t.Fatalf("Members = %v, %v", ms, err)
	}
	for _, m := range ms.GetMembers() {
		if m.GetNodeId() == "n4" && (m.GetApiUrl() != n4.url || m.GetSuffrage() != "voter") {
			t.Fatalf("joiner's member entry = %v", m)
		}
	}
	waitCond(t, "the joiner to apply the last write", func() bool {
		tv, _ := n4.rn.n.FSM().Tenant(raftfsm.SystemTenant)
		_, ok, _ := tv.GetTask("after")
		return ok
	})
	// Joining again is a no-op; removing the member shrinks the cluster.
	if _, err := admin.Join(ctx, &pb.JoinRequest{NodeId: "n4", RaftAddr: n4.rn.n.RaftAddr(), ApiUrl: n4.url}); err != nil {
		t.Fatalf("repeated Join: %v", err)
	}
	if _, err := admin.RemoveMember(ctx, &pb.RemoveMemberRequest{NodeId: "n4"}); err != nil {
		t.Fatalf("RemoveMember: %v", err)
	}
	n4.kill()
	waitCond(t, "three members", func() bool {
		ms, err := admin.Members(ctx, &pb.MembersRequest{})
		return err == nil && len(ms.GetMembers()) == 3
	})
	if _, err := admin.RemoveMember(ctx, &pb.RemoveMemberRequest{NodeId: "nope"}); codeOf(err) != connect.CodeNotFound {
		t.Fatalf("RemoveMember(unknown) = %v", err)
	}
}

// TestLinModel_RejectsStaleRead makes sure the model can fail: a read that
// misses an acknowledged enqueue, or sees a completion that never happened.
func TestLinModel_RejectsStaleRead(t *testing.T) {
	t.Parallel()
	op := func(c int, o, k string, call, ret int64, out string) porcupine.Operation {
		return porcupine.Operation{ClientId: c, Input: linInput{o, k}, Call: call, Output: linOutput{kind: out}, Return: ret}
	}
	m := linModel.ToModel()
	ok := []porcupine.Operation{op(0, "enqueue", "a", 0, 10, "ok"), op(1, "get", "a", 5, 6, "absent"), op(1, "get", "a", 11, 12, "active"),
		op(2, "enqueue", "b", 0, math.MaxInt64, "unknown"), op(1, "get", "b", 20, 21, "active"),
		op(2, "enqueue", "c", 0, 10, "exists"), op(1, "get", "c", 11, 12, "active")}
	if !porcupine.CheckOperations(m, ok) {
		t.Fatal("a linearizable history was rejected")
	}
	for name, h := range map[string][]porcupine.Operation{
		"stale read":          {op(0, "enqueue", "a", 0, 10, "ok"), op(1, "get", "a", 11, 12, "absent")},
		"phantom completion":  {op(0, "enqueue", "a", 0, 10, "ok"), op(1, "get", "a", 11, 12, "completed")},
		"double enqueue":      {op(0, "enqueue", "a", 0, 10, "ok"), op(1, "enqueue", "a", 11, 12, "ok")},
		"exists then absent":  {op(0, "enqueue", "a", 0, 10, "exists"), op(1, "get", "a", 11, 12, "absent")},
		"completion reverted": {op(0, "enqueue", "a", 0, 1, "ok"), op(0, "complete", "a", 2, 3, "ok"), op(1, "get", "a", 4, 5, "active")},
	} {
		if porcupine.CheckOperations(m, h) {
			t.Errorf("%s: accepted", name)
		}
	}
}

// enqueueFresh enqueues tasks with new IDs. The client re-sends an Enqueue
// whose try may have applied (a leader change cut it), and client/doc.go
// documents the replay's answer: task_already_exists. That answer is
// accepted only when every task exists with the scan and target sent (the
// first try applied), never for a task this request did not create.
func enqueueFresh(ctx context.Context, t testing.TB, cl *client.Client, tasks []*pb.NewTask) {
	t.Helper()
	_, err := cl.Enqueue(ctx, &pb.EnqueueRequest{Tasks: tasks})
	if err == nil {
		return
	}
	if !errors.Is(err, distributed.ErrTaskAlreadyExists) {
		t.Fatalf("Enqueue: %v", err)
	}
	for _, nt := range tasks {
		g, gerr := cl.GetTask(ctx, &pb.GetTaskRequest{TaskId: nt.GetTaskId()})
		if gerr != nil || g.GetTask().GetScanId() != nt.GetScanId() || g.GetTask().GetTargetRef() != nt.GetTargetRef() {
			t.Fatalf("Enqueue answered %v, but task %s is %v, %v: not this request's replay", err, nt.GetTaskId(), g.GetTask(), gerr)
		}
	}
	t.Logf("Enqueue was replayed after a try that applied (%v)", err)
}
