package main

// The load shapes of `bench` beyond the batched default (issue 15): a
// fixed-rate open loop (--rate), records resident before the measured run
// (--resident), idle long-polling connections (--idle-conns), and the
// profiles that locate the per-call costs (--memprofile, --mutexprofile,
// --blockprofile). docs/benchmarks.md ("Issue 15: the per-call path")
// records what they measured.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
	"time"

	"github.com/termivar/distributed/client"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// benchModeFlags are the mode flags of `bench`, one row each: a static
// table, registered by registerBenchModes.
var benchModeFlags = [...]struct {
	name, usage string
	def         int // an int flag's default
	intVar      func(*benchFlags) *int
	strVar      func(*benchFlags) *string
}{
	{name: "wait-secs", usage: "each worker Acquire's long-poll wait (the agent's default is 20; idle workers cost one empty Acquire per wait)", intVar: func(f *benchFlags) *int { return &f.waitSecs }, def: 20},
	{name: "rate", usage: "open loop: producers enqueue at this many tasks/s in total (0: as fast as they can)", intVar: func(f *benchFlags) *int { return &f.rate }},
	{name: "resident", usage: "task records filled before the measured run: half (at most 8192) queued but not due for an hour, the rest completed", intVar: func(f *benchFlags) *int { return &f.resident }},
	{name: "idle-conns", usage: "after the run, hold this many worker connections in a long-polling Acquire and report the memory per connection (embedded only)", intVar: func(f *benchFlags) *int { return &f.idleConns }},
	{name: "node-metrics", usage: "the node's /metrics URL (serve's --metrics-addr): report its CPU per task, GC cycles and goroutines during the run apart from this process's", strVar: func(f *benchFlags) *string { return &f.nodeMetricsURL }},
	{name: "idle-profile", usage: "with --idle-conns: write heap and goroutine profiles to this path plus .heap and .goroutine while the idle long-polls wait", strVar: func(f *benchFlags) *string { return &f.idleProfile }},
	{name: "complete-call-bytes", usage: "bound of one CompleteMany call's message: a larger one is sent as several calls (0: the client's default, 1 MiB less a page; negative: never split)", intVar: func(f *benchFlags) *int { return &f.completeCallBytes }},
	{name: "snapshot-bytes", usage: "the embedded node's --snapshot-bytes (0: serve's default; negative: by entry count only)", intVar: func(f *benchFlags) *int { return &f.snapshotBytes }},
	{name: "snapshot-growth", usage: "the embedded node's --snapshot-growth (0: serve's default; negative: --snapshot-bytes alone)", intVar: func(f *benchFlags) *int { return &f.snapshotGrowth }},
	{name: "memprofile", usage: "write an allocation profile of the run to this file", strVar: func(f *benchFlags) *string { return &f.memProfile }},
	{name: "mutexprofile", usage: "write a mutex contention profile of the run to this file", strVar: func(f *benchFlags) *string { return &f.mutexProfile }},
	{name: "blockprofile", usage: "write a blocking profile of the run to this file", strVar: func(f *benchFlags) *string { return &f.blockProfile }},
	{name: "trace", usage: "write an execution trace (runtime/trace) of the run's measured part to this file (ignored with --suite)", strVar: func(f *benchFlags) *string { return &f.traceFile }},
}

// registerBenchModes adds benchModeFlags to fs.
func registerBenchModes(fs *flag.FlagSet, f *benchFlags) {
	for _, m := range benchModeFlags {
		if m.intVar != nil {
			fs.IntVar(m.intVar(f), m.name, m.def, m.usage)
		} else {
			fs.StringVar(m.strVar(f), m.name, "", m.usage)
		}
	}
	fs.BoolVar(&f.suite, "suite", false, "run every mode in one sitting and print their ratios to the batched default (make bench-node)")
}

// validModes reports whether the mode flags are within their bounds.
func (f benchFlags) validModes() bool {
	return f.waitSecs >= 1 && f.waitSecs <= 60 && f.rate >= 0 && f.resident >= 0 && f.resident+f.tasks <= maxBenchRecords && f.idleConns >= 0 &&
		f.workers+f.idleConns <= maxBenchWorkers && (f.idleConns == 0 || f.embedded)
}

const (
	// maxBenchRecords is the run tenant's record ceiling (benchTenant).
	maxBenchRecords = 65536
	// maxBenchWorkers bounds --workers plus --idle-conns (the run
	// tenant's worker limit).
	maxBenchWorkers = 1024
	// residentDelaySecs keeps the resident queued tasks out of the run.
	residentDelaySecs = 3600
	// maxResidentQueued leaves half the run tenant's queue (16 384) to
	// the measured run.
	maxResidentQueued = 8192
)

// startProfiles starts the CPU profile and turns on the mutex and block
// profiles the flags ask for; stop ends the CPU profile and writes every
// other asked-for profile of the run.
func (f benchFlags) startProfiles() (stop func() error, err error) {
	var stopCPU func()
	if f.cpuProfile != "" && f.suite {
		if stopCPU, err = startCPUProfile(f.cpuProfile); err != nil {
			return nil, err
		}
	}
	if f.mutexProfile != "" {
		runtime.SetMutexProfileFraction(5)
	}
	if f.blockProfile != "" {
		runtime.SetBlockProfileRate(int(10 * time.Microsecond))
	}
	return func() error {
		if stopCPU != nil {
			stopCPU()
		}
		for _, p := range []struct{ path, name string }{{f.memProfile, "allocs"}, {f.mutexProfile, "mutex"}, {f.blockProfile, "block"}} {
			if p.path == "" {
				continue
			}
			if err := writeProfile(p.path, p.name); err != nil {
				return err
			}
		}
		return nil
	}, nil
}

// startTrace writes an execution trace to path until stop (go tool trace
// reads it: the goroutine hand-offs of a run, docs/benchmarks.md "2 000
// tasks/s, session 8").
func startTrace(path string) (stop func(), err error) {
	return startToFile(path, trace.Start, trace.Stop)
}

// startCPUProfile writes a CPU profile to path until stop. A single run
// (not --suite) profiles its measured part only (benchRun.startRun), so
// that the setup of 1 024 workers' keys and registrations is not in it.
func startCPUProfile(path string) (stop func(), err error) {
	return startToFile(path, pprof.StartCPUProfile, pprof.StopCPUProfile)
}

// startToFile creates path and starts a recorder writing to it; the
// returned stop ends the recorder and closes the file.
func startToFile(path string, start func(io.Writer) error, end func()) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := start(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { end(); f.Close() }, nil
}

func writeProfile(path, name string) error {
	pf, err := os.Create(path)
	if err != nil {
		return err
	}
	defer pf.Close()
	if name == "allocs" {
		// NB: the allocation profile is as of the last completed
		// collection (runtime.MemProfile): without one here it missed
		// the run's last cycle (about a fifth of a 64 KiB-result run).
		runtime.GC()
	}
	return pprof.Lookup(name).WriteTo(pf, 0)
}

// pace holds an open-loop producer until task index lo is due: --rate
// tasks/s from the run's start, whatever the calls before it took.
func (r *benchRun) pace(ctx context.Context, lo int) bool {
	if r.f.rate <= 0 {
		return ctx.Err() == nil
	}
	due := r.start.Add(time.Duration(float64(lo) / float64(r.f.rate) * float64(time.Second)))
	d := time.Until(due)
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// fillResident creates --resident task records before the run: half of
// them, at most maxResidentQueued, enqueued not due for an hour (queued
// records no worker leases during the run), the rest first, enqueued,
// leased and completed (retained terminal records).
func (r *benchRun) fillResident(ctx context.Context) error {
	done := r.f.resident - min(r.f.resident/2, maxResidentQueued)
	for lo := 0; lo < done; lo += residentChunk {
		hi := min(lo+residentChunk, done)
		if err := r.enqueueResident(ctx, lo, hi, 0); err != nil {
			return err
		}
		if err := r.completeResident(ctx, hi-lo); err != nil {
			return err
		}
	}
	return r.enqueueResident(ctx, done, r.f.resident, residentDelaySecs)
}

// residentChunk is how many resident tasks are enqueued before they are
// completed: well inside the run tenant's queue (16 384).
const residentChunk = 4096

// completeResident leases and completes n queued tasks as worker w0.
// NB: its leases last --lease-ttl-secs, as the run's: the leases of a try
// whose reply was lost (re-issued by the client) come back after it, and
// the loop ends; with 600 s, a try cut off by its attempt deadline under
// -race at load left the loop polling until a 600 s test timeout.
func (r *benchRun) completeResident(ctx context.Context, n int) error {
	for n > 0 {
		acq, err := r.workers[0].Acquire(ctx, &pb.AcquireRequest{WorkerId: "w0", MaxTasks: 256, Start: true, WaitSecs: 1, LeaseTtlSecs: uint64(r.f.leaseTTL)})
		if err != nil {
			return err
		}
		items := make([]*pb.CompleteRequest, len(acq.GetTasks()))
		for i, t := range acq.GetTasks() {
			items[i] = &pb.CompleteRequest{LeaseToken: t.GetLeaseToken(), Result: r.result}
		}
		if len(items) > 0 {
			if _, err := r.workers[0].CompleteMany(ctx, &pb.CompleteManyRequest{Items: items}); err != nil {
				return err
			}
		}
		n -= len(items)
	}
	return nil
}

// enqueueResident enqueues resident tasks lo..hi-1 in batches of 500.
func (r *benchRun) enqueueResident(ctx context.Context, lo, hi int, delay uint64) error {
	for lo < hi {
		n := min(500, hi-lo)
		req := &pb.EnqueueRequest{Tasks: make([]*pb.NewTask, n)}
		for i := range n {
			req.Tasks[i] = &pb.NewTask{TaskId: "r-" + strconv.Itoa(lo+i), ScanId: "resident", TargetRef: "resident-" + strconv.Itoa(lo+i), DelaySecs: delay}
		}
		if err := benchEnqueue(ctx, r.prod, req, &r.errs); err != nil {
			return err
		}
		lo += n
	}
	return nil
}

// idleConnBytes holds n worker connections in a long-polling Acquire on
// an empty queue and returns the Go heap and stacks they add per
// connection, both ends of the loopback included (the server's handler,
// its connection and the client's). Embedded only: the node must share
// this process's memory statistics. It also returns the goroutines each
// waiting connection adds (docs/benchmarks.md, "1 024 workers": the
// collector scans every parked goroutine's stack on each cycle).
func (r *benchRun) idleConnBytes(ctx context.Context, n int) (idleMem, error) {
	base := settledMem()
	baseG := runtime.NumGoroutine()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, n)
	for i := range n {
		w := r.idle[i]
		go func() {
			_, err := w.Acquire(ctx, &pb.AcquireRequest{WorkerId: "i" + strconv.Itoa(i), MaxTasks: 1, WaitSecs: 60})
			errc <- err
		}()
	}
	if err := r.waitLongPolls(ctx, int64(n), errc); err != nil {
		return idleMem{}, err
	}
	g := float64(runtime.NumGoroutine()-baseG) / float64(n)
	m := settledMem()
	if err := r.writeIdleProfiles(); err != nil {
		return idleMem{}, err
	}
	return idleMem{bytes: (m.total() - base.total()) / int64(n), stackBytes: (m.stack - base.stack) / int64(n), goroutines: g}, nil
}

// idleMem is what one idle long-polling connection holds (idleConnBytes).
type idleMem struct {
	bytes, stackBytes int64   // heap and stacks, of which stacks
	goroutines        float64 // goroutines, both ends
}

// writeIdleProfiles writes --idle-profile's heap and goroutine profiles
// (none when it is empty). The heap profile is as of settledMem's
// collection, which saw the idle long-polls.
func (r *benchRun) writeIdleProfiles() error {
	if r.f.idleProfile == "" {
		return nil
	}
	if err := writeProfile(r.f.idleProfile+".heap", "heap"); err != nil {
		return err
	}
	return writeProfile(r.f.idleProfile+".goroutine", "goroutine")
}

// waitLongPolls polls the node's Status until want Acquire calls wait (or
// one of them ended early).
func (r *benchRun) waitLongPolls(ctx context.Context, want int64, errc <-chan error) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := r.admin.Status(ctx, &pb.StatusRequest{})
		if err != nil {
			return err
		}
		if st.GetLongPollsWaiting() >= want {
			return nil
		}
		select {
		case err := <-errc:
			return fmt.Errorf("idle Acquire ended early: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d Acquire calls waiting after 30s", st.GetLongPollsWaiting(), want)
		}
	}
}

// settledMem is the heap in use and the goroutine stacks after a
// collection.
func settledMem() benchMem {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return benchMem{heap: int64(m.HeapInuse), stack: int64(m.StackInuse)}
}

// benchMem is the heap in use and the stacks (settledMem).
type benchMem struct{ heap, stack int64 }

func (m benchMem) total() int64 { return m.heap + m.stack }

// registerIdle creates and registers --idle-conns worker clients.
func (r *benchRun) registerIdle(ctx context.Context, mk func(string) (*client.Client, error)) error {
	for i := range r.f.idleConns {
		w, err := mk("worker")
		if err != nil {
			return err
		}
		r.idle = append(r.idle, w)
		if _, err := w.RegisterWorker(ctx, &pb.RegisterWorkerRequest{WorkerId: "i" + strconv.Itoa(i), Capacity: 1}); err != nil {
			return err
		}
	}
	return nil
}

// dropScans deletes the run's scans ("bench", and "resident" when filled),
// forcing out the resident tasks still queued, so that the node's heap is
// back to what it was before the run.
func (r *benchRun) dropScans(ctx context.Context) error {
	scans := []string{"bench"}
	if r.f.resident > 0 {
		scans = append(scans, "resident")
	}
	for _, scan := range scans {
		if _, err := r.owner.DeleteScan(ctx, &pb.DeleteScanRequest{ScanId: scan, Force: true}); err != nil {
			return fmt.Errorf("delete scan %s after the run: %w", scan, err)
		}
	}
	return nil
}

// h2cClient is the bench's HTTP client with --h2c: HTTP/2 without TLS by
// prior knowledge (server.NewHTTPServer accepts it), so the workers'
// calls share a few connections (the server admits 250 streams on one)
// instead of holding one each: docs/benchmarks.md compares the CPU and
// the memory per idle long-poll of the two. http:// URLs only.
func h2cClient(url string) (*http.Client, error) {
	for u := range strings.SplitSeq(url, ",") {
		if !strings.HasPrefix(strings.TrimSpace(u), "http://") {
			return nil, errors.New("--h2c needs http:// server URLs (over TLS, HTTP/2 is negotiated)")
		}
	}
	t := client.NewTransport(nil, 64)
	t.Protocols = new(http.Protocols)
	t.Protocols.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: t}, nil
}
