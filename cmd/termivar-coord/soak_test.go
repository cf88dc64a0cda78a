// Soak test of a node that runs an endless stream of scans (issue 11's
// evidence; docs/benchmarks.md, "Soak"). Goal: a `serve` process with the
// service's default limits runs TERMIVAR_SOAK_TARGETS targets (default
// 20 000: CI; `make soak` runs 1 000 000) in scans of mixed sizes, one of
// them a fifth of the total (200 000 of 1 000 000), through two `worker`
// processes; each scan is enqueued with the flow-controlled `enqueue
// --file --wait-records` while `results --follow --json
// --delete-after-read` writes its results to a file, so the tenant's
// completed tasks are purged as they are read. Every result must be in the
// files exactly once, and the node's RSS, its snapshot size and its
// restart time must stay flat: at every tenth of the targets the test
// reads VmRSS/VmHWM from /proc, the size of the newest raft snapshot, and
// restarts the node (SIGTERM, then start until /readyz answers 200); the
// median of the last three samples must be within soakGrowth × the sample
// after the first fifth plus a small constant (a bound on growth, not a
// timing assertion). The curve is logged. Method: real processes, the
// built binary.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/termivar/distributed/client"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// Flatness bounds: the last sample may exceed soakGrowth × the baseline
// (the sample after the first fifth of the targets) by at most these.
const (
	soakGrowth        = 1.5
	soakRSSSlackKiB   = 32 << 10 // 32 MiB
	soakSnapSlack     = 256 << 10
	soakRestartSlack  = 3 * time.Second
	soakDefaultTarget = 20000
)

// soakNode is a serve process that the test restarts on the same data dir.
type soakNode struct {
	bin, dir, api, raft, metrics string
	url, key                     string
	cmd                          *exec.Cmd
	log                          *os.File
}

// start runs serve (service default limits) and returns how long it took
// until /readyz answered 200.
func (n *soakNode) start(t *testing.T) time.Duration {
	t.Helper()
	began := time.Now()
	n.cmd = exec.Command(n.bin, "serve", "--data-dir", n.dir, "--api-addr", n.api, "--raft-addr", n.raft,
		"--metrics-addr", n.metrics, "--node-id", "soak", "--tick", "200ms")
	n.cmd.Stdout, n.cmd.Stderr = n.log, n.log
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitWithin(t, "serve /readyz (log "+n.log.Name()+")", 2*time.Minute, func() bool {
		resp, err := http.Get("http://" + n.metrics + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	took := time.Since(began)
	if n.key == "" {
		k, err := client.LoadKey(filepath.Join(n.dir, "admin.key"))
		if err != nil {
			t.Fatal(err)
		}
		n.key = k
	}
	return took
}

// stop sends SIGTERM and waits for the exit.
func (n *soakNode) stop(t *testing.T) {
	t.Helper()
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- n.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		_ = n.cmd.Process.Kill()
		<-done
		t.Fatalf("serve did not exit within 1 min of SIGTERM")
	}
}

// soakSample is one point of the curve.
type soakSample struct {
	targets          int
	rssKiB, hwmKiB   int
	anonKiB          int // RssAnon: VmRSS without file-backed pages
	snapBytes        int64
	restart, elapsed time.Duration
	records          uint32
	applied          uint64
}

// procStatusKiB reads VmRSS, VmHWM and RssAnon of a process.
func procStatusKiB(t *testing.T, pid int) (rss, hwm, anon int) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.Atoi(f[1])
		switch f[0] {
		case "VmRSS:":
			rss = v
		case "VmHWM:":
			hwm = v
		case "RssAnon:":
			anon = v
		}
	}
	return rss, hwm, anon
}

// snapshotBytes is the size of the newest raft snapshot under dir (the
// files of the newest directory below a "snapshots" directory).
func snapshotBytes(t *testing.T, dir string) int64 {
	t.Helper()
	sizes := map[string]int64{}
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() || filepath.Base(filepath.Dir(filepath.Dir(p))) != "snapshots" {
			return nil
		}
		sizes[filepath.Dir(p)] += fi.Size()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	newest, newestIndex := "", uint64(0)
	for d := range sizes {
		// NB: a snapshot directory is named term-index-millis, not
		// zero-padded: compare the index as a number.
		f := strings.Split(filepath.Base(d), "-")
		if strings.HasSuffix(d, ".tmp") || len(f) != 3 {
			continue
		}
		if idx, err := strconv.ParseUint(f[1], 10, 64); err == nil && idx >= newestIndex {
			newest, newestIndex = d, idx
		}
	}
	return sizes[newest]
}

// soakScans returns the scan sizes: one of total/5, the rest in a cycle of
// smaller sizes, summing to total. The big scan runs once two fifths are
// done, so the baseline (one fifth) is taken before it.
func soakScans(total int) []int {
	big := total / 5
	cycle := []int{total / 100, total / 40, total / 20, total / 250, total / 50}
	var out []int
	left, sum, placed := total-big, 0, false
	for i := 0; left > 0; i++ {
		if !placed && sum >= 2*total/5 {
			out, sum, placed = append(out, big), sum+big, true
		}
		s := min(max(cycle[i%len(cycle)], 1), left)
		out, sum, left = append(out, s), sum+s, left-s
	}
	if !placed {
		out = append(out, big)
	}
	return out
}

// startSoakWorker runs a worker whose command prints the target (one
// exec per task, no shell).
func startSoakWorker(t *testing.T, e *e2eNode, id string, capacity int) {
	t.Helper()
	log := &lockedBuffer{}
	cmd := exec.Command(e.bin, "worker", "--server", e.url, "--key", e.key, "--id", id,
		"--capacity", strconv.Itoa(capacity), "--poll-wait", "2s", "--heartbeat", "2s",
		"--", "printenv", "TERMIVAR_TARGET")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("worker %s log (tail):\n%s", id, tail(log.String(), 2000))
		}
	})
}

func TestSoak(t *testing.T) {
	bin := binary(t)
	total := soakDefaultTarget
	if v, err := strconv.Atoi(os.Getenv("TERMIVAR_SOAK_TARGETS")); err == nil && v >= 1000 {
		total = v
	}
	dir := t.TempDir()
	logf, err := os.Create(filepath.Join(dir, "serve.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	n := &soakNode{bin: bin, dir: filepath.Join(dir, "data"), api: freeAddr(t), raft: freeAddr(t), metrics: freeAddr(t), log: logf}
	n.url = "http://" + n.api
	n.start(t)
	defer n.stop(t)
	defer func() {
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("serve log (tail):\n%s", tail(string(b), 4000))
		}
	}()
	e := &e2eNode{bin: bin, dir: dir, url: n.url, key: n.key}
	for i := range 2 {
		startSoakWorker(t, e, fmt.Sprintf("w%d", i), 64)
	}
	c := e.client(t)
	began := time.Now()
	var samples []soakSample
	done, next := 0, total/10
	for k, size := range soakScans(total) {
		scan := fmt.Sprintf("s%03d", k)
		runSoakScan(t, e, c, filepath.Join(dir, scan), scan, size)
		done += size
		if done < next {
			continue
		}
		for next <= done {
			next += total / 10
		}
		samples = append(samples, sampleSoak(t, n, c, done, time.Since(began)))
		logSoakSample(t, samples[len(samples)-1])
	}
	logSoakCurve(t, total, samples)
	checkSoakFlat(t, samples)
	if last := samples[len(samples)-1]; last.records != 0 {
		t.Fatalf("after every scan was followed with --delete-after-read the tenant holds %d task records, want 0", last.records)
	}
}

// runSoakScan enqueues size targets into scan with the flow-controlled
// enqueue while a follower writes the results to base.jsonl, then checks
// that the file holds every target's result exactly once, in enqueue order.
func runSoakScan(t *testing.T, e *e2eNode, c *client.Client, base, scan string, size int) {
	t.Helper()
	in, err := os.Create(base + ".txt")
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(in)
	for i := range size {
		fmt.Fprintf(w, "%s-%07d\n", scan, i)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	in.Close()
	enq := exec.Command(e.bin, "--server", e.url, "--key", e.key, "enqueue", "--scan", scan, "--file", base+".txt",
		"--wait-records", "--quiet", "--retry-for", "2m")
	enqOut := &lockedBuffer{}
	enq.Stdout, enq.Stderr = enqOut, enqOut
	if err := enq.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = enq.Process.Kill() }()
	waitSoak(t, "scan "+scan+" to exist", func() bool {
		p, err := c.ScanProgress(context.Background(), &pb.ScanProgressRequest{ScanId: scan})
		return err == nil && p.GetTotal() > 0
	})
	out, err := os.Create(base + ".jsonl")
	if err != nil {
		t.Fatal(err)
	}
	fol := exec.Command(e.bin, "--server", e.url, "--key", e.key, "results", "--scan", scan, "--follow", "--json", "--delete-after-read")
	folErr := &lockedBuffer{}
	fol.Stdout, fol.Stderr = out, folErr
	if err := fol.Run(); err != nil {
		t.Fatalf("follower of %s: %v: %s", scan, err, folErr.String())
	}
	out.Close()
	if err := enq.Wait(); err != nil {
		t.Fatalf("enqueue of %s: %v: %s", scan, err, enqOut.String())
	}
	checkSoakFile(t, base+".jsonl", scan, size)
}

// checkSoakFile: every target's result once, in enqueue order.
func checkSoakFile(t *testing.T, path, scan string, size int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	i := 0
	for sc.Scan() {
		var r resultJSON
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("%s line %d %q: %v", path, i+1, sc.Text(), err)
		}
		want := fmt.Sprintf("%s-%07d", scan, i)
		if r.TargetRef != want || strings.TrimSuffix(r.Result, "\n") != want {
			t.Fatalf("%s line %d = target %q result %q, want %s (every result once, in enqueue order)", path, i+1, r.TargetRef, r.Result, want)
		}
		i++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if i != size {
		t.Fatalf("%s holds %d results, want %d", path, i, size)
	}
	_ = os.Remove(path)
}

// sampleSoak reads the node's RSS, snapshot size and task records, then
// restarts it and times the restart.
func sampleSoak(t *testing.T, n *soakNode, c *client.Client, done int, elapsed time.Duration) soakSample {
	t.Helper()
	s := soakSample{targets: done, elapsed: elapsed}
	s.rssKiB, s.hwmKiB, s.anonKiB = procStatusKiB(t, n.cmd.Process.Pid)
	st, err := c.Status(context.Background(), &pb.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	s.records, s.applied = st.GetTaskRecords(), st.GetAppliedIndex()
	n.stop(t)
	s.snapBytes = snapshotBytes(t, n.dir)
	s.restart = n.start(t)
	return s
}

// soakHeader names logSoakSample's columns.
const soakHeader = "targets, elapsed, VmRSS MiB, VmHWM MiB, RssAnon MiB, snapshot KiB, restart ms, task records, raft applied index"

// logSoakSample logs one sample as it is taken (a long run shows its
// curve so far).
func logSoakSample(t *testing.T, s soakSample) {
	t.Logf("sample: %8d %8.1fs %7.1f %7.1f %7.1f %9.1f %6d %6d %9d", s.targets, s.elapsed.Seconds(), float64(s.rssKiB)/1024,
		float64(s.hwmKiB)/1024, float64(s.anonKiB)/1024, float64(s.snapBytes)/1024, s.restart.Milliseconds(), s.records, s.applied)
}

func logSoakCurve(t *testing.T, total int, samples []soakSample) {
	t.Logf("soak: %d targets; %s", total, soakHeader)
	for _, s := range samples {
		logSoakSample(t, s)
	}
}

// checkSoakFlat bounds the end of the curve by the sample after the first
// fifth: the median of the last three samples, so that one garbage
// collector's swing (Go returns freed heap lazily) is not read as growth
// while a trend still is.
func checkSoakFlat(t *testing.T, samples []soakSample) {
	t.Helper()
	if len(samples) < 5 {
		t.Fatalf("only %d samples", len(samples))
	}
	base, end := samples[1], samples[len(samples)-3:]
	rss := median3(end[0].rssKiB, end[1].rssKiB, end[2].rssKiB)
	if lim := int(float64(base.rssKiB)*soakGrowth) + soakRSSSlackKiB; rss > lim {
		t.Errorf("VmRSS grew from %d KiB to %d KiB (median of the last three), above %.1f× + %d KiB", base.rssKiB, rss, soakGrowth, soakRSSSlackKiB)
	}
	snap := median3(end[0].snapBytes, end[1].snapBytes, end[2].snapBytes)
	if lim := int64(float64(base.snapBytes)*soakGrowth) + soakSnapSlack; snap > lim {
		t.Errorf("snapshot grew from %d to %d bytes (median of the last three), above %.1f× + %d", base.snapBytes, snap, soakGrowth, soakSnapSlack)
	}
	restart := median3(end[0].restart, end[1].restart, end[2].restart)
	if lim := time.Duration(float64(base.restart)*soakGrowth) + soakRestartSlack; restart > lim {
		t.Errorf("restart time grew from %v to %v (median of the last three), above %.1f× + %v", base.restart, restart, soakGrowth, soakRestartSlack)
	}
}

func median3[T int | int64 | time.Duration](a, b, c T) T {
	return max(min(a, b), min(max(a, b), c))
}

// waitSoak polls cond with a deadline of one minute.
func waitSoak(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waitWithin(t, what, time.Minute, cond)
}
