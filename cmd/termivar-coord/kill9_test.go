// Crash test of the real binary. Goal: nothing acknowledged to a client is
// lost or duplicated by kill -9 at a random point. Method: build
// termivar-coord, run `serve` on a temp data dir, run concurrent producers
// (Enqueue) and workers (Acquire+Complete with a result) against it, SIGKILL
// it after a random delay, restart it, and check that every acknowledged
// enqueue, completion and result is present, exactly once, with the
// acknowledged bytes. Repeats TERMIVAR_KILL9_ITERATIONS times (default 20).
package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.uber.org/goleak"

	"github.com/termivar/distributed/client"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func buildBinary(t testing.TB) string {
	t.Helper()
	return buildBinaryTags(t, "")
}

// buildBinaryTags builds termivar-coord with the build tags (comma-separated; "" none).
func buildBinaryTags(t testing.TB, tags string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "termivar-coord")
	out, err := exec.Command("go", "build", "-tags", tags, "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

type coord struct {
	cmd *exec.Cmd
	url string
}

// startCoord runs serve with every task limit at its ceiling; extra flags
// come last and override them.
func startCoord(t testing.TB, bin, dir string, api, raftPort int, extra ...string) *coord {
	t.Helper()
	args := append([]string{"serve", "--data-dir", dir,
		"--api-addr", "127.0.0.1:" + strconv.Itoa(api), "--raft-addr", "127.0.0.1:" + strconv.Itoa(raftPort),
		"--tick", "200ms", "--heartbeat-timeout", "3600",
		"--max-task-records", "65536", "--max-active-tasks", "16384", "--max-queued-tasks", "16384",
		"--max-terminal-tasks", "65536", "--max-results", "65536"}, extra...)
	cmd := exec.Command(bin, args...)
	logf, err := os.OpenFile(filepath.Join(dir, "serve.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &coord{cmd: cmd, url: "http://127.0.0.1:" + strconv.Itoa(api)}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(c.url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return c
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	cmd.Process.Kill()
	cmd.Wait()
	log, _ := os.ReadFile(filepath.Join(dir, "serve.log"))
	t.Fatalf("coordinator not ready:\n%s", log)
	return nil
}

func (c *coord) kill9(t testing.TB) {
	t.Helper()
	if err := c.cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	_ = c.cmd.Wait()
}

// ledger records what clients were told succeeded.
type ledger struct {
	mu       sync.Mutex
	scans    []string          // every scan an enqueue was attempted in
	enqueued map[string]string // task ID → scan ID
	results  map[string]string // task ID → acknowledged result
	fresh    []string          // task IDs acknowledged since the last check
}

func TestServe_Kill9(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and crashes the binary")
	}
	iterations := 20
	if v, err := strconv.Atoi(os.Getenv("TERMIVAR_KILL9_ITERATIONS")); err == nil && v > 0 {
		iterations = v
	}
	bin := buildBinary(t)
	dir := t.TempDir()
	api, raftPort := freePort(t), freePort(t)
	// A keep-alive client with an idle connection per concurrent caller.
	hc := &http.Client{Transport: client.NewTransport(nil, 16)}
	defer hc.CloseIdleConnections()
	led := &ledger{enqueued: map[string]string{}, results: map[string]string{}}
	var prodKey, workKey, adminKey string
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 42))

	for it := 0; it < iterations; it++ {
		c := startCoord(t, bin, dir, api, raftPort)
		if it == 0 {
			ak, err := os.ReadFile(filepath.Join(dir, "admin.key"))
			if err != nil {
				t.Fatal(err)
			}
			if st, _ := os.Stat(filepath.Join(dir, "admin.key")); st.Mode().Perm() != 0o600 {
				t.Fatalf("admin.key mode %v", st.Mode().Perm())
			}
			adminKey = strings.TrimSpace(string(ak))
			admin := newClients(hc, c.url, adminKey)
			for _, r := range []struct {
				role string
				dst  *string
			}{{"producer", &prodKey}, {"worker", &workKey}} {
				res, err := admin.admin.CreateKey(context.Background(), connect.NewRequest(&pb.CreateKeyRequest{Role: r.role}))
				if err != nil {
					t.Fatal(err)
				}
				*r.dst = res.Msg.GetKey()
			}
			w := newClients(hc, c.url, workKey)
			for i := range 2 {
				if _, err := w.worker.RegisterWorker(context.Background(), connect.NewRequest(&pb.RegisterWorkerRequest{WorkerId: "w" + strconv.Itoa(i), Capacity: 4096})); err != nil {
					t.Fatal(err)
				}
			}
		}
		verifyLedger(t, newClients(hc, c.url, prodKey), led, false)
		runClients(t, c.url, hc, prodKey, workKey, it, led, time.Duration(50+rng.IntN(400))*time.Millisecond, c)
		// NB: the killed process's keep-alive connections are dead; do not
		// let the next check pick one from the pool.
		hc.CloseIdleConnections()
	}
	c := startCoord(t, bin, dir, api, raftPort)
	verifyLedger(t, newClients(hc, c.url, prodKey), led, true)
	led.mu.Lock()
	t.Logf("after %d kill -9 cycles: %d acknowledged enqueues, %d acknowledged results, all present exactly once", iterations, len(led.enqueued), len(led.results))
	led.mu.Unlock()
	c = flowEnqueueKill9(t, bin, dir, api, raftPort, c, adminKey)
	c.cmd.Process.Signal(os.Interrupt)
	c.cmd.Wait()
}

// runClients runs two producers and two workers until the coordinator is
// killed after d.
func runClients(t *testing.T, url string, hc *http.Client, prodKey, workKey string, it int, led *ledger, d time.Duration, c *coord) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	scan := "s" + strconv.Itoa(it)
	led.mu.Lock()
	led.scans = append(led.scans, scan)
	led.mu.Unlock()
	for p := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := newClients(hc, url, prodKey)
			for n := 0; ctx.Err() == nil; n++ {
				req := &pb.EnqueueRequest{}
				for k := range 10 {
					req.Tasks = append(req.Tasks, &pb.NewTask{TaskId: fmt.Sprintf("i%d-p%d-%d-%d", it, p, n, k), ScanId: scan, TargetRef: "t"})
				}
				if _, err := cl.producer.Enqueue(ctx, connect.NewRequest(req)); err != nil {
					continue // unacknowledged: may or may not be applied
				}
				led.mu.Lock()
				for _, tk := range req.Tasks {
					led.enqueued[tk.GetTaskId()] = scan
					led.fresh = append(led.fresh, tk.GetTaskId())
				}
				led.mu.Unlock()
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := newClients(hc, url, workKey)
			for ctx.Err() == nil {
				acq, err := cl.worker.Acquire(ctx, connect.NewRequest(&pb.AcquireRequest{WorkerId: "w" + strconv.Itoa(w), MaxTasks: 8, Start: true, WaitSecs: 1}))
				if err != nil {
					continue
				}
				for _, task := range acq.Msg.GetTasks() {
					result := "res-" + task.GetTaskId()
					if _, err := cl.worker.Complete(ctx, connect.NewRequest(&pb.CompleteRequest{LeaseToken: task.GetLeaseToken(), Result: []byte(result)})); err != nil {
						continue
					}
					led.mu.Lock()
					led.results[task.GetTaskId()] = result
					led.fresh = append(led.fresh, task.GetTaskId())
					led.mu.Unlock()
				}
			}
		}()
	}
	time.Sleep(d)
	c.kill9(t)
	cancel()
	wg.Wait()
}

// verifyLedger checks the enqueues and results acknowledged since the last
// check (after the final restart: all of them). With full set, it also
// streams every scan's results and checks that each appears once and that
// results and completions agree.
func verifyLedger(t *testing.T, cl apiClients, led *ledger, full bool) {
	t.Helper()
	ctx := context.Background()
	led.mu.Lock()
	defer led.mu.Unlock()
	ids := led.fresh
	if full {
		ids = ids[:0]
		for id := range led.enqueued {
			ids = append(ids, id)
		}
	}
	led.fresh = nil
	for _, id := range ids {
		res, err := retryUnavailable(func() (*connect.Response[pb.GetTaskResponse], error) {
			return cl.producer.GetTask(ctx, connect.NewRequest(&pb.GetTaskRequest{TaskId: id}))
		})
		if err != nil {
			t.Fatalf("acknowledged task %s lost: %v", id, err)
		}
		if want, ok := led.results[id]; ok {
			if res.Msg.GetTask().GetStatus() != "completed" || !res.Msg.GetTask().GetHasResult() {
				t.Fatalf("acknowledged completion of %s lost: status %s (result %q)", id, res.Msg.GetTask().GetStatus(), want)
			}
		}
	}
	if !full {
		return
	}
	acked := map[string]int{}
	for _, scan := range led.enqueued {
		acked[scan]++
	}
	// NB: every scan an enqueue was attempted in, not only those with an
	// acknowledged enqueue: an enqueue the kill cut off before its reply
	// may still have been applied, and may be the only one of its scan.
	var records uint32
	for _, scan := range led.scans {
		prog, err := retryUnavailable(func() (*connect.Response[pb.ScanProgressResponse], error) {
			return cl.producer.ScanProgress(ctx, connect.NewRequest(&pb.ScanProgressRequest{ScanId: scan}))
		})
		if err != nil {
			t.Fatal(err)
		}
		records += prog.Msg.GetTotal()
		if acked[scan] == 0 && prog.Msg.GetTotal() > 0 {
			t.Logf("scan %s: %d tasks applied, none acknowledged (enqueues cut off by the kill)", scan, prog.Msg.GetTotal())
		}
		if prog.Msg.GetCompleted() != prog.Msg.GetResults() {
			t.Fatalf("scan %s: %d completed but %d results", scan, prog.Msg.GetCompleted(), prog.Msg.GetResults())
		}
		stream, err := cl.producer.AggregateResults(ctx, connect.NewRequest(&pb.AggregateResultsRequest{ScanId: scan}))
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for stream.Receive() {
			id := stream.Msg().GetTaskId()
			if seen[id] {
				t.Fatalf("result of %s streamed twice", id)
			}
			seen[id] = true
			if string(stream.Msg().GetResult()) != "res-"+id {
				t.Fatalf("result of %s = %q", id, stream.Msg().GetResult())
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if uint32(len(seen)) != prog.Msg.GetResults() {
			t.Fatalf("scan %s: streamed %d results, progress says %d", scan, len(seen), prog.Msg.GetResults())
		}
	}
	st, err := retryUnavailable(func() (*connect.Response[pb.StatusResponse], error) {
		return cl.admin.Status(ctx, connect.NewRequest(&pb.StatusRequest{}))
	})
	if err != nil {
		t.Fatal(err)
	}
	if st.Msg.GetTaskRecords() != records || int(records) < len(led.enqueued) {
		t.Fatalf("task records %d, scans hold %d, acknowledged %d", st.Msg.GetTaskRecords(), records, len(led.enqueued))
	}
}

// retryUnavailable retries a read that failed with Unavailable (a transport
// error, or a node that is not serving yet) for up to 30 s. Any other
// answer, such as not_found for a lost task, is returned at once.
func retryUnavailable[T any](call func() (*connect.Response[T], error)) (*connect.Response[T], error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := call()
		if err == nil || connect.CodeOf(err) != connect.CodeUnavailable || time.Now().After(deadline) {
			return res, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}
