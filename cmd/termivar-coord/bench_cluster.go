package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/termivar/distributed/client"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/node"
)

// maxBenchCluster bounds --cluster (members in one process).
const maxBenchCluster = 7

// runBenchCluster is `bench --cluster N`: the same load against a
// single-member node and then against an N-member loopback cluster, both
// started in this process through serve's own startNode with serve's
// defaults, in fresh temporary directories; it prints both results, their
// ratio, and how long a write took to be acknowledged again after the
// leader was killed.
func runBenchCluster(f benchFlags, w io.Writer) int {
	single, err := benchOnCluster(f, 1)
	if err != nil {
		fmt.Fprintln(os.Stderr, "termivar-coord bench: single node:", err)
		return exitFor("bench", err)
	}
	fmt.Fprintf(w, "== single node\n%s\n", single.res)
	multi, err := benchOnCluster(f, f.cluster)
	if err != nil {
		fmt.Fprintln(os.Stderr, "termivar-coord bench: cluster:", err)
		return exitFor("bench", err)
	}
	fmt.Fprintf(w, "== %d-member cluster (leader %s)\n%s\n", f.cluster, multi.leader, multi.res)
	fmt.Fprintf(w, "cluster_to_single_ratio=%.2f\n", multi.res.tasksPerSec()/single.res.tasksPerSec())
	if single.res.cpu > 0 {
		fmt.Fprintf(w, "single_to_cluster_cpu_per_task_ratio=%.2f\n", float64(single.res.cpuPerTask())/float64(multi.res.cpuPerTask()))
		// NB: cores the process used on average in each half: near the
		// cores it could get, the half was CPU-bound, and the throughput
		// ratio then follows the CPU-per-task ratio; well below, it was
		// bound by latency (docs/benchmarks.md, issue 16).
		fmt.Fprintf(w, "cores_used single=%.2f cluster=%.2f\n", single.res.coresUsed(), multi.res.coresUsed())
	}
	fmt.Fprintf(w, "leader_kill_recovery=%s (killed %s, next leader %s)\n", multi.recovery.Round(time.Millisecond), multi.leader, multi.next)
	return exitOK
}

// coresUsed is the process's CPU time over the run's wall time.
func (r benchResult) coresUsed() float64 {
	return r.cpu.Seconds() / max(r.elapsed.Seconds(), 1e-9)
}

// clusterBench is one run of benchOnCluster.
type clusterBench struct {
	res          benchResult
	leader, next string        // the leader during the run, the one after the kill
	recovery     time.Duration // from the leader's kill to the next acknowledged write
}

// benchOnCluster starts size members, runs the bench against them (leader
// first in the URL list) and, with more than one member, kills the leader
// and measures the recovery.
func benchOnCluster(f benchFlags, size int) (clusterBench, error) {
	var out clusterBench
	c, err := startBenchCluster(size)
	if err != nil {
		return out, err
	}
	defer c.stop()
	lead := c.leader()
	if lead < 0 {
		return out, errors.New("no leader")
	}
	out.leader = c.ids[lead]
	if out.res, err = bench(context.Background(), f, c.urls(lead), c.key); err != nil {
		return out, err
	}
	if size > 1 {
		out.recovery, out.next, err = c.killLeaderRecovery(lead)
	}
	return out, err
}

// benchCluster is a loopback cluster of runningNodes in this process.
type benchCluster struct {
	dir   string
	ids   []string
	nodes []*runningNode
	key   string // admin key
	wg    sync.WaitGroup
	dead  []bool
}

func startBenchCluster(size int) (_ *benchCluster, err error) {
	c := &benchCluster{nodes: make([]*runningNode, size), dead: make([]bool, size)}
	if c.dir, err = os.MkdirTemp("", "termivar-bench-cluster-"); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			c.stop()
		}
	}()
	flags, err := c.memberFlags(size)
	if err != nil {
		return nil, err
	}
	errs := make([]error, size)
	var wg sync.WaitGroup
	for i := range size {
		// NB: the pprof label marks every goroutine the member starts
		// (raft's included), so a --cpuprofile splits by member.
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			pprof.Do(ctx, c.label(i), func(ctx context.Context) {
				c.nodes[i], errs[i] = startNode(ctx, flags[i], slog.New(slog.DiscardHandler))
			})
		})
	}
	wg.Wait()
	for i := range size {
		if errs[i] != nil {
			return nil, fmt.Errorf("start %s: %w", c.ids[i], errs[i])
		}
		rn := c.nodes[i]
		c.wg.Go(func() {
			pprof.Do(context.Background(), c.label(i), func(context.Context) { _ = rn.hs.Serve(rn.ln) })
		})
	}
	c.key, err = client.LoadKey(filepath.Join(c.dir, c.ids[0], node.AdminKeyFile))
	return c, err
}

// label is member i's pprof label: bench_member=<size>/<id>.
func (c *benchCluster) label(i int) pprof.LabelSet {
	return pprof.Labels("bench_member", strconv.Itoa(len(c.ids))+"/"+c.ids[i])
}

// memberFlags are serve's defaults plus each member's dir, ID, port-0
// listeners and (with more than one member) --peers and a fresh
// --cluster-secret-file.
func (c *benchCluster) memberFlags(size int) ([]serveFlags, error) {
	out := make([]serveFlags, size)
	var peers []string
	for i := range size {
		c.ids = append(c.ids, "n"+strconv.Itoa(i+1))
		if err := newServeFlagSet(&out[i]).Parse(nil); err != nil {
			return nil, err
		}
		api, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		raft, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			api.Close()
			return nil, err
		}
		f := &out[i]
		f.dataDir, f.nodeID = filepath.Join(c.dir, c.ids[i]), c.ids[i]
		f.apiAddr, f.raftAddr = api.Addr().String(), raft.Addr().String()
		f.cluster.apiListener, f.cluster.raftListener, f.cluster.raftLog = api, raft, io.Discard
		peers = append(peers, c.ids[i]+"="+f.raftAddr)
	}
	if size == 1 {
		return out, nil
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return nil, err
	}
	secretFile := filepath.Join(c.dir, "cluster.secret")
	if err := os.WriteFile(secretFile, secret, 0o600); err != nil {
		return nil, err
	}
	for i := range out {
		out[i].cluster.peers, out[i].cluster.secretFile = strings.Join(peers, ","), secretFile
	}
	return out, nil
}

// leader waits up to 30 s for a live member that leads with its API URL
// replicated; -1 if none does.
func (c *benchCluster) leader() int {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for i, rn := range c.nodes {
			if !c.dead[i] && rn.n.IsLeader() && rn.n.LeaderAPIURL() == rn.url {
				return i
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return -1
}

// urls lists the live members' URLs, member first first.
func (c *benchCluster) urls(first int) string {
	var out []string
	for i := range c.nodes {
		j := (first + i) % len(c.nodes)
		if !c.dead[j] {
			out = append(out, c.nodes[j].url)
		}
	}
	return strings.Join(out, ",")
}

// kill stops member i hard: connections dropped, raft shut down without
// handing leadership over.
func (c *benchCluster) kill(i int) {
	if c.dead[i] || c.nodes[i] == nil {
		return
	}
	c.dead[i] = true
	rn := c.nodes[i]
	_ = rn.hs.Close()
	rn.n.Close()
	rn.srv.CloseIdleConnections()
	rn.al.Close()
}

func (c *benchCluster) stop() {
	for i := range c.nodes {
		c.kill(i)
	}
	c.wg.Wait()
	os.RemoveAll(c.dir)
}

// killLeaderRecovery kills member lead and enqueues one task at a time
// (each try cut off after 500 ms) through every member's URL, the dead
// one last, until one is acknowledged; it returns the time from the kill
// to that acknowledgement and the new leader.
func (c *benchCluster) killLeaderRecovery(lead int) (time.Duration, string, error) {
	urls := c.urls(lead + 1)
	cl, err := client.New(client.Config{ServerURL: urls + "," + c.nodes[lead].url, Key: c.key, MaxAttempts: 3,
		MinBackoff: 5 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	if err != nil {
		return 0, "", err
	}
	defer cl.Close()
	start := time.Now()
	c.kill(lead)
	for try := 0; time.Since(start) < 60*time.Second; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		_, err = cl.Enqueue(ctx, &pb.EnqueueRequest{Tasks: []*pb.NewTask{{TaskId: "after-kill-" + strconv.Itoa(try), ScanId: "after-kill", TargetRef: "t"}}})
		cancel()
		if err == nil {
			d := time.Since(start)
			next := c.leader()
			if next < 0 {
				return d, "", errors.New("no leader after the kill")
			}
			return d, c.ids[next], nil
		}
	}
	return 0, "", fmt.Errorf("no write acknowledged within 60 s of the leader's kill: %w", err)
}
