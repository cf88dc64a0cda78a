package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	distributed "github.com/termivar/distributed"
	"github.com/termivar/distributed/client"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/gen/termivar/v1/termivarv1connect"
	"github.com/termivar/distributed/internal/metrics"
	"github.com/termivar/distributed/node"
	"github.com/termivar/distributed/raftfsm"
)

type benchFlags struct {
	client      clientFlags
	embedded    bool
	dataDir     string
	producers   int
	workers     int
	tasks       int
	batch       int
	acquireMax  int
	resultBytes int
	leaseTTL    int
	cpuProfile  string
	cluster     int // members of the loopback cluster compared with one node (0: off)

	// The modes of bench_modes.go (benchModeFlags).
	waitSecs, rate, resident, idleConns    int
	completeCallBytes                      int // --complete-call-bytes: client.Config.CompleteManyCallBytes
	snapshotBytes                          int // --snapshot-bytes: the embedded node's node.Config.SnapshotBytes
	snapshotGrowth                         int // --snapshot-growth: the embedded node's node.Config.SnapshotGrowth
	memProfile, mutexProfile, blockProfile string
	traceFile                              string // --trace: an execution trace of a single run's measured part
	suite                                  bool
	dropAfter                              bool // delete the run's scans once measured (--suite: every mode starts from the same heap)
	h2c                                    bool // HTTP/2 without TLS (h2cClient)
	// singleCalls turns off the fewer-calls paths: every Enqueue its own
	// call (no coalescing) and completions in CompleteMany calls of their
	// own, not in the next Acquire (as before issue 15's per-call work).
	singleCalls bool
	// workerSession: the workers' clients send Acquire and CompleteMany
	// as messages of a worker session (client.Config.WorkerSession, over
	// h2c), and a worker's Acquire that carries completions long-polls.
	workerSession bool
	// producerSession: the producers' client sends its coalesced Enqueue
	// calls as messages of a producer session (client.Config.ProducerSession,
	// over h2c); enqueueInFlight is its EnqueueCallsInFlight (0: the
	// client's default).
	producerSession bool
	enqueueInFlight int
	idleProfile     string // --idle-profile: heap and goroutine profiles of the idle long-polls
	nodeMetricsURL  string // --node-metrics: the node's /metrics URL (benchNode)
	// nodeMetrics is the embedded node's registry (nil against --server):
	// each run reports its raft chain from it (bench_chain.go).
	nodeMetrics *metrics.Registry
	// wrapTransport, when set, wraps the run's HTTP transport (tests: a
	// reply lost on the wire).
	wrapTransport func(http.RoundTripper) http.RoundTripper
}

// runBench drives N producers and M workers against a node over loopback
// HTTP and reports completed tasks/s and latency percentiles. Without
// --server it starts an embedded node (fsync on, as in production) in a
// temporary directory. --server takes the same comma-separated URL list as
// every client command; the load rides through leader changes (see
// benchRetry).
func runBench(args []string) int {
	var f benchFlags
	fs := newBenchFlagSet(&f)
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if !f.valid() || !f.validModes() {
		fmt.Fprintln(os.Stderr, "termivar-coord bench: flag out of range")
		return exitUsage
	}
	if err := f.client.validRetry(); err != nil {
		fmt.Fprintln(os.Stderr, "termivar-coord bench:", err)
		return exitUsage
	}
	stopProfiles, err := f.startProfiles()
	if err != nil {
		fmt.Fprintln(os.Stderr, "termivar-coord bench:", err)
		return exitUsage
	}
	defer func() {
		if err := stopProfiles(); err != nil {
			fmt.Fprintln(os.Stderr, "termivar-coord bench:", err)
		}
	}()
	if f.cluster > 0 {
		if !f.embedded {
			fmt.Fprintln(os.Stderr, "termivar-coord bench: --cluster starts its own nodes; it does not take --embedded=false")
			return exitUsage
		}
		return runBenchCluster(f, os.Stdout)
	}
	url, key := f.client.server, f.client.key
	if f.embedded {
		f.nodeMetrics = metrics.New()
		stop, u, k, err := startBenchNodeMetrics(f.dataDir, benchSnapshots{bytes: int64(f.snapshotBytes), growth: f.snapshotGrowth}, f.nodeMetrics)
		if err != nil {
			fmt.Fprintln(os.Stderr, "termivar-coord bench:", err)
			return exitRejected
		}
		defer stop()
		url, key = u, k
	} else if key == "" {
		if key, err = f.client.apiKey(); err != nil {
			fmt.Fprintln(os.Stderr, "termivar-coord bench:", err)
			return exitUsage
		}
	}
	if f.suite {
		return runBenchSuite(context.Background(), f, url, key, os.Stdout)
	}
	res, err := bench(context.Background(), f, url, key)
	if err != nil {
		return exitFor("bench", err)
	}
	fmt.Println(res)
	return exitOK
}

func newBenchFlagSet(f *benchFlags) *flag.FlagSet {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	f.client.register(fs)
	fs.BoolVar(&f.embedded, "embedded", true, "start an embedded node on loopback (false: use --server/--key)")
	fs.StringVar(&f.dataDir, "data-dir", "", "embedded node data dir (default: a temporary dir)")
	fs.IntVar(&f.producers, "producers", 2, "concurrent producers")
	fs.IntVar(&f.workers, "workers", 16, "concurrent workers")
	fs.IntVar(&f.tasks, "tasks", 60000, "tasks to run (at most 65536: one tenant's record ceiling)")
	fs.IntVar(&f.batch, "batch", 500, "tasks per Enqueue")
	fs.IntVar(&f.acquireMax, "acquire", 128, "max tasks per Acquire (and per CompleteMany)")
	fs.IntVar(&f.resultBytes, "result-bytes", 32, "bytes of each result")
	fs.IntVar(&f.leaseTTL, "lease-ttl-secs", 30, "lease TTL of each Acquire (leases granted by a reply lost in a leader change come back after it)")
	fs.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of the run to this file")
	fs.IntVar(&f.cluster, "cluster", 0, "also run against a loopback cluster of this many members in this process and report the ratio to one node and the leader-kill recovery (0: off)")
	fs.BoolVar(&f.singleCalls, "single-calls", false, "every Enqueue its own call and every batch of completions its own CompleteMany (off: concurrent Enqueues share calls and a worker's completions ride on its next Acquire)")
	registerBenchModes(fs, f)
	fs.BoolVar(&f.workerSession, "worker-session", false, "workers send Acquire and CompleteMany as messages of one Worker.Session stream each (HTTP/2 without TLS, http:// only); an Acquire carrying completions then long-polls, its completions answered at once")
	fs.BoolVar(&f.producerSession, "producer-session", false, "the producers' coalesced Enqueue calls go as messages of one Producer.Session stream (HTTP/2 without TLS, http:// only); enqueue_calls counts the messages")
	fs.IntVar(&f.enqueueInFlight, "enqueue-calls-in-flight", 0, "the producers' client.Config.EnqueueCallsInFlight (1-64; 0: the client's default, 2, or 4 with --producer-session)")
	fs.BoolVar(&f.h2c, "h2c", false, "speak HTTP/2 without TLS (http:// only): the calls of all workers share a few connections")
	return fs
}

// maxBenchEnqueueInFlight bounds --enqueue-calls-in-flight (0 is the
// client's default; --single-calls turns coalescing off).
const maxBenchEnqueueInFlight = 64

// valid reports whether every numeric flag is within its bound.
func (f benchFlags) valid() bool {
	return f.tasks >= 1 && f.tasks <= distributed.MaxTaskRecords && f.producers >= 1 && f.workers >= 1 &&
		f.batch >= 1 && f.batch <= raftfsm.MaxEnqueueTasks && f.acquireMax >= 1 && f.acquireMax <= raftfsm.MaxAcquireTasks && f.leaseTTL >= 1 &&
		f.cluster >= 0 && f.cluster <= maxBenchCluster && f.enqueueInFlight >= 0 && f.enqueueInFlight <= maxBenchEnqueueInFlight
}

// benchSnapshots are the embedded node's snapshot triggers: its
// node.Config.SnapshotBytes and SnapshotGrowth (0: the defaults).
type benchSnapshots struct {
	bytes  int64
	growth int
}

// startBenchNode starts an embedded node (with its audit log, as serve
// has) on dir, or on a temporary dir that stop removes, with the snapshot
// triggers snap.
func startBenchNode(dir string, snap benchSnapshots) (stop func(), url, key string, err error) {
	return startBenchNodeMetrics(dir, snap, nil)
}

// startBenchNodeMetrics is startBenchNode whose node records its raft
// instruments in reg (nil: none).
func startBenchNodeMetrics(dir string, snap benchSnapshots, reg *metrics.Registry) (stop func(), url, key string, err error) {
	tmp := ""
	if dir == "" {
		if tmp, err = os.MkdirTemp("", "termivar-bench-"); err != nil {
			return nil, "", "", err
		}
		dir = tmp
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := node.Config{DataDir: dir, RaftAddr: "127.0.0.1:0", SnapshotBytes: snap.bytes, SnapshotGrowth: snap.growth}
	if reg != nil {
		cfg.Metrics = reg.Node
	}
	e, err := startEmbedded(ctx, cfg, nil, true)
	if err != nil {
		return nil, "", "", err
	}
	return func() {
		e.Close()
		if tmp != "" {
			os.RemoveAll(tmp)
		}
	}, e.URL, e.Key, nil
}

type benchResult struct {
	tasks                  int
	elapsed                time.Duration
	leaseP50, leaseP99     time.Duration
	e2eP50, e2eP99         time.Duration
	producers, workers     int
	batch, acquire         int
	appliedBefore, applied uint64
	errors, retries        int64
	cpu                    time.Duration // this process's CPU time during the run (0: not reported)
	rate, resident         int           // --rate (0: closed loop) and --resident
	resultBytes            int           // --result-bytes
	mode                   string        // the --suite mode's name
	idleConns              int           // --idle-conns measured after the run (0: none)
	idle                   idleMem       // per idle long-polling connection (both ends)
	gc                     benchGC       // this process's collector and allocator during the run
	node                   benchNode     // the node's process during the run (--node-metrics; zero: not read)
	calls                  [4]int64      // Enqueue (and EnqueueMany), Acquire (of which empty), CompleteMany calls
	workerStartCPU         time.Duration // CPU until every worker waited in its first Acquire (not in cpu)
	chain                  benchChain    // the embedded node's raft chain during the run (zero: not known)
	switches               int64         // this process's context switches during the run (0: not reported)
}

func (r benchResult) String() string {
	return fmt.Sprintf("tasks=%d producers=%d workers=%d batch=%d acquire=%d elapsed=%s\n"+
		"completed_tasks_per_sec=%.0f\n"+
		"acquire_to_complete_p50=%s acquire_to_complete_p99=%s\n"+
		"enqueue_to_complete_p50=%s enqueue_to_complete_p99=%s\n"+
		"raft_log_entries=%d raft_log_entries_per_task=%.3f\n"+
		"process_cpu_per_task=%s\n"+
		"api_calls_per_task=%.3f enqueue_calls=%d acquire_calls=%d empty_acquires=%d complete_many_calls=%d\n"+
		"failed_calls_retried=%d client_retries=%d\n"+
		"workers_start_cpu_per_worker=%s%s",
		r.tasks, r.producers, r.workers, r.batch, r.acquire, r.elapsed.Round(time.Millisecond),
		r.tasksPerSec(),
		r.leaseP50.Round(time.Microsecond), r.leaseP99.Round(time.Microsecond),
		r.e2eP50.Round(time.Microsecond), r.e2eP99.Round(time.Microsecond),
		r.entries(), r.entriesPerTask(), r.cpuPerTask(), r.callsPerTask(), r.calls[0], r.calls[1], r.calls[2], r.calls[3],
		r.errors, r.retries, r.workerStartCPU/time.Duration(max(r.workers, 1)), r.modeLines())
}

// modeLines are the result lines of the modes that were on.
func (r benchResult) modeLines() string {
	s := ""
	if r.rate > 0 {
		s += fmt.Sprintf("\nrate=%d", r.rate)
	}
	if r.switches > 0 {
		s += fmt.Sprintf("\ncontext_switches_per_task=%.2f", float64(r.switches)/float64(max(r.tasks, 1)))
	}
	if r.resident > 0 {
		s += fmt.Sprintf("\nresident_records=%d", r.resident)
	}
	if r.idleConns > 0 {
		s += fmt.Sprintf("\nidle_conns=%d bytes_per_idle_conn=%d stack_bytes_per_idle_conn=%d goroutines_per_idle_conn=%.2f",
			r.idleConns, r.idle.bytes, r.idle.stackBytes, r.idle.goroutines)
	}
	return s + r.chain.line() + r.gc.line(r.tasks) + r.node.line(r.tasks)
}

func (r benchResult) tasksPerSec() float64 { return float64(r.tasks) / r.elapsed.Seconds() }

// callsPerTask is the load's API calls (Enqueue, Acquire, CompleteMany)
// per completed task.
func (r benchResult) callsPerTask() float64 {
	return float64(r.calls[0]+r.calls[1]+r.calls[3]) / float64(max(r.tasks, 1))
}

// benchCalls counts a run's API calls: Acquire and CompleteMany once
// however many tries the client made, Enqueue per request on the wire
// (benchCallCounter: a coalesced call carries several callers).
type benchCalls struct{ enqueue, acquire, emptyAcquire, complete atomic.Int64 }

func (c *benchCalls) snapshot() [4]int64 {
	return [4]int64{c.enqueue.Load(), c.acquire.Load(), c.emptyAcquire.Load(), c.complete.Load()}
}

// benchCallCounter counts the Enqueue and EnqueueMany requests that go
// through it in n, and the messages of a producer session.
type benchCallCounter struct {
	next http.RoundTripper
	n    *atomic.Int64
}

func (c benchCallCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	switch p := r.URL.Path; {
	case strings.HasSuffix(p, "/Enqueue") || strings.HasSuffix(p, "/EnqueueMany"):
		c.n.Add(1)
	case p == termivarv1connect.ProducerSessionProcedure:
		r = r.WithContext(r.Context()) // NB: a copy: a RoundTripper must not change its request
		r.Body = &envelopeCounter{ReadCloser: r.Body, n: c.n}
	}
	return c.next.RoundTrip(r)
}

// envelopeCounter counts the Connect envelopes (one message each: a flags
// byte, a 4-byte big-endian length, the message) read through it.
type envelopeCounter struct {
	io.ReadCloser
	n      *atomic.Int64
	header [5]byte
	got    int    // bytes of header read
	left   uint32 // bytes of the current message still to read
}

func (e *envelopeCounter) Read(p []byte) (int, error) {
	n, err := e.ReadCloser.Read(p)
	for b := p[:n]; len(b) > 0; {
		if e.left > 0 {
			k := min(uint32(len(b)), e.left)
			e.left -= k
			b = b[k:]
			continue
		}
		k := copy(e.header[e.got:], b)
		e.got += k
		b = b[k:]
		if e.got == len(e.header) {
			e.n.Add(1)
			h := e.header
			e.got, e.left = 0, uint32(h[1])<<24|uint32(h[2])<<16|uint32(h[3])<<8|uint32(h[4]) // big-endian
		}
	}
	return n, err
}

// CloseIdleConnections forwards to the wrapped transport.
func (c benchCallCounter) CloseIdleConnections() {
	if t, ok := c.next.(interface{ CloseIdleConnections() }); ok {
		t.CloseIdleConnections()
	}
}

// entries is the number of raft log entries the run appended.
func (r benchResult) entries() uint64 { return r.applied - r.appliedBefore }

func (r benchResult) entriesPerTask() float64 { return float64(r.entries()) / float64(max(r.tasks, 1)) }

// cpuPerTask is the process's CPU time per completed task (clients and
// every node in this process included).
func (r benchResult) cpuPerTask() time.Duration {
	return r.cpu / time.Duration(max(r.tasks, 1))
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	i := int(float64(len(d)-1) * p)
	return d[i]
}

// Bench's clients ride through leader changes as the CLI's do: each call
// is tried again for --retry-timeout (client.Client moves between the
// --server URLs, follows leader hints, and re-issues a try that its attempt
// deadline cut off); a call that still fails unreachable is counted and
// sent again by the bench loop, up to benchMaxConsecutiveErrors times in a
// row.
const benchMaxConsecutiveErrors = 20

// retryCounter is a slog.Handler that counts the client's retry messages.
type retryCounter struct{ n *atomic.Int64 }

func (h retryCounter) Enabled(context.Context, slog.Level) bool { return true }
func (h retryCounter) Handle(context.Context, slog.Record) error {
	h.n.Add(1)
	return nil
}
func (h retryCounter) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h retryCounter) WithGroup(string) slog.Handler      { return h }

// benchRetry reports whether a failed call is ridden through (counted in
// errs, then sent again): unreachable after all the client's tries, unless
// consecutive such failures (counted in *streak) reached the cap.
func benchRetry(err error, streak *int, errs *atomic.Int64) bool {
	if !client.IsUnreachable(err) {
		return false
	}
	errs.Add(1)
	*streak++
	return *streak < benchMaxConsecutiveErrors
}

// benchRun is one bench run: its clients, the shared work counters and
// the latencies the workers measured.
type benchRun struct {
	f       benchFlags
	admin   *client.Client
	prod    *client.Client
	workers []*client.Client

	retries, errs atomic.Int64 // client retries (retryCounter), calls ridden through (benchRetry)
	next          atomic.Int64 // first task index not yet claimed by a producer
	completed     atomic.Int64
	enqueuedAt    []atomic.Int64 // task index → enqueue time (Unix ns); 0 until enqueued
	result        []byte         // every task's result
	start         time.Time      // the measured run's start (--rate paces from it)
	calls         benchCalls     // the measured run's API calls
	gc0, doneGC   benchGC        // the process's collector at the start and at finish
	node0, doneNd benchNode      // the node's process at the start and at finish (--node-metrics)
	owner         *client.Client // the producer, kept after closeLoad for dropScans
	doneOnce      sync.Once
	doneAt        time.Time     // when the last task's completion was acknowledged
	doneCPU       time.Duration // the process's CPU time then
	doneSwitches  int64         // the process's context switches then (processSwitches)
	idle          []*client.Client

	cancel    context.CancelFunc // ends the run: all tasks completed, or a failure
	stopCPU   func()             // ends the measured run's CPU profile (nil: none)
	stopTrace func()             // ends the measured run's execution trace (nil: none)
	cpuOnce   sync.Once
	errOnce   sync.Once
	firstErr  error

	mu               sync.Mutex // guards leaseLat and e2eLat
	leaseLat, e2eLat []time.Duration
}

func bench(ctx context.Context, f benchFlags, url, adminKey string) (benchResult, error) {
	r := &benchRun{f: f, enqueuedAt: make([]atomic.Int64, f.tasks), result: make([]byte, f.resultBytes)}
	defer r.close()
	if err := r.connect(ctx, url, adminKey); err != nil {
		return benchResult{}, err
	}
	if err := r.fillResident(ctx); err != nil {
		return benchResult{}, err
	}
	st, err := r.prod.Status(ctx, &pb.StatusRequest{})
	if err != nil {
		return benchResult{}, err
	}
	res := benchResult{tasks: f.tasks, producers: f.producers, workers: f.workers, batch: f.batch, acquire: f.acquireMax, appliedBefore: st.GetAppliedIndex(),
		rate: f.rate, resident: f.resident, idleConns: f.idleConns, resultBytes: f.resultBytes}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	r.cancel = cancel
	var wg sync.WaitGroup
	defer wg.Wait()
	if res.workerStartCPU, err = r.startWorkers(runCtx, &wg); err != nil {
		cancel()
		return res, err
	}
	if err := r.startRunProfile(); err != nil {
		cancel()
		return res, err
	}
	defer r.stopRunProfile()
	r.node0 = readBenchNode(ctx, f.nodeMetricsURL)
	r.gc0 = readBenchGC()
	r.calls.enqueue.Store(0) // the calls of the run only (not --resident's)
	chain0 := nodeChain(f.nodeMetrics)
	start, cpu0, sw0 := time.Now(), processCPU(), processSwitches()
	r.start = start
	for range f.producers {
		wg.Go(func() { r.produce(runCtx) })
	}
	wg.Go(func() { r.watchProgress(runCtx, benchStallAfter) })
	wg.Wait()
	res.chain = nodeChain(f.nodeMetrics).since(chain0)
	if r.doneAt.IsZero() { // the run failed: measure up to now
		r.doneAt, r.doneCPU, r.doneSwitches = time.Now(), processCPU(), processSwitches()
	}
	res.elapsed, res.cpu, res.switches = r.doneAt.Sub(start), r.doneCPU-cpu0, r.doneSwitches-sw0
	res.errors, res.retries = r.errs.Load(), r.retries.Load()
	res.calls = r.calls.snapshot()
	res.gc, res.node = r.collected(ctx)
	r.closeLoad()
	if r.firstErr != nil && r.completed.Load() < int64(f.tasks) {
		return res, r.firstErr
	}
	if st, err := r.admin.Status(ctx, &pb.StatusRequest{}); err == nil {
		res.applied = st.GetAppliedIndex()
	}
	res.leaseP50, res.leaseP99 = percentile(r.leaseLat, 0.50), percentile(r.leaseLat, 0.99)
	res.e2eP50, res.e2eP99 = percentile(r.e2eLat, 0.50), percentile(r.e2eLat, 0.99)
	if f.idleConns > 0 {
		if res.idle, err = r.idleConnBytes(ctx, f.idleConns); err != nil {
			return res, err
		}
	}
	if f.dropAfter {
		return res, r.dropScans(ctx)
	}
	return res, nil
}

// connect creates the run's tenant (limits at the ceilings, so the run is
// bounded by --tasks only), its producer client and one registered worker
// client per --workers, each with its own key.
func (r *benchRun) connect(ctx context.Context, url, adminKey string) error {
	hc, err := r.f.client.httpClient(r.f.producers + r.f.workers + r.f.idleConns + 4)
	if err != nil {
		return err
	}
	if r.f.h2c {
		if hc, err = h2cClient(url); err != nil {
			return err
		}
	}
	counted := *hc
	counted.Transport = benchCallCounter{next: cmp.Or[http.RoundTripper](hc.Transport, http.DefaultTransport), n: &r.calls.enqueue}
	if r.f.wrapTransport != nil {
		counted.Transport = r.f.wrapTransport(counted.Transport)
	}
	hc = &counted
	log := slog.New(retryCounter{&r.retries})
	inFlight := r.f.enqueueInFlight
	if r.f.singleCalls {
		inFlight = -1
	}
	whc, err := r.sessionHTTPClient(url, hc, r.f.workerSession)
	if err != nil {
		return err
	}
	phc, err := r.sessionHTTPClient(url, hc, r.f.producerSession)
	if err != nil {
		return err
	}
	base, err := withRetryTimeout(client.Config{ServerURL: url, MinBackoff: 50 * time.Millisecond, Logger: log,
		EnqueueCallsInFlight: inFlight, CompleteManyCallBytes: r.f.completeCallBytes}, r.f.client.retryTimeout)
	if err != nil {
		return err
	}
	newC := func(key string) (*client.Client, error) {
		cfg := base
		cfg.Key, cfg.HTTPClient = key, hc
		return client.New(cfg)
	}
	newProducerC := func(key string) (*client.Client, error) {
		cfg := base
		cfg.Key, cfg.HTTPClient, cfg.ProducerSession = key, phc, r.f.producerSession
		return client.New(cfg)
	}
	newWorkerC := func(key string) (*client.Client, error) {
		cfg := base
		cfg.Key, cfg.HTTPClient, cfg.WorkerSession = key, whc, r.f.workerSession
		return client.New(cfg)
	}
	if r.admin, err = newC(adminKey); err != nil {
		return err
	}
	tenant := "bench-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if _, err := r.admin.CreateTenant(ctx, benchTenant(tenant)); err != nil {
		return err
	}
	mkClient := func(role string) (*client.Client, error) {
		k, err := r.admin.CreateKey(ctx, &pb.CreateKeyRequest{Tenant: tenant, Role: role})
		if err != nil {
			return nil, err
		}
		if role == "worker" {
			return newWorkerC(k.GetKey())
		}
		return newProducerC(k.GetKey())
	}
	if r.prod, err = mkClient("producer"); err != nil {
		return err
	}
	r.owner = r.prod
	for range r.f.workers {
		w, err := mkClient("worker")
		if err != nil {
			return err
		}
		r.workers = append(r.workers, w)
	}
	if err := r.registerWorkers(ctx); err != nil {
		return err
	}
	return r.registerIdle(ctx, mkClient)
}

// sessionHTTPClient is the workers' (or the producers') HTTP client: hc,
// or with sessions (--worker-session, --producer-session) one that speaks
// h2c (the session's stream needs HTTP/2), its Enqueue calls counted as
// hc's are.
func (r *benchRun) sessionHTTPClient(url string, hc *http.Client, sessions bool) (*http.Client, error) {
	if !sessions || r.f.h2c {
		return hc, nil
	}
	h, err := h2cClient(url)
	if err != nil {
		return nil, err
	}
	counted := *h
	counted.Transport = benchCallCounter{next: cmp.Or[http.RoundTripper](h.Transport, http.DefaultTransport), n: &r.calls.enqueue}
	if r.f.wrapTransport != nil {
		counted.Transport = r.f.wrapTransport(counted.Transport)
	}
	return &counted, nil
}

// registerWorkers registers every worker at once, as a fleet of workers
// starting up does: the connections their calls open stay in the shared
// transport's idle pool, so the measured run does not time the dialling
// and accepting of one connection per worker (--workers 1024: ≈ 0.1 s
// of CPU, docs/benchmarks.md), which long-running workers pay once.
func (r *benchRun) registerWorkers(ctx context.Context) error {
	errs := make([]error, len(r.workers))
	var wg sync.WaitGroup
	for i, w := range r.workers {
		wg.Go(func() {
			_, errs[i] = w.RegisterWorker(ctx, &pb.RegisterWorkerRequest{WorkerId: "w" + strconv.Itoa(i), Capacity: distributed.MaxWorkerCapacity})
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// benchTenant is the CreateTenant request of a run's tenant.
func benchTenant(name string) *pb.CreateTenantRequest {
	return &pb.CreateTenantRequest{Name: name,
		Limits: &pb.CoreLimits{MaxTaskRecords: distributed.MaxTaskRecords, MaxActiveTasks: distributed.MaxActiveTasks,
			MaxQueuedTasks: distributed.MaxActiveTasks, MaxTerminalTasks: distributed.MaxTaskRecords, MaxWorkers: 1024,
			MaxRetries: 3, MaxLeaseTtlSecs: 3600, MaxTaskTtlSecs: 86400, HeartbeatTimeoutSecs: 3600},
		ResultLimits: &pb.ResultLimits{MaxResults: distributed.MaxResults, MaxResultBytes: 1 << 20, MaxTotalBytes: distributed.MaxTotalResultBytes,
			MaxAggregateItems: distributed.MaxAggregateItems, MaxAggregateBytes: distributed.MaxTotalResultBytes}}
}

// closeLoad closes the producer and worker clients (once).
func (r *benchRun) closeLoad() {
	for _, w := range r.workers {
		w.Close()
	}
	if r.prod != nil {
		r.prod.Close()
	}
	r.workers, r.prod = nil, nil
}

// close closes every client of the run (once).
func (r *benchRun) close() {
	r.closeLoad()
	for _, w := range r.idle {
		w.Close()
	}
	r.idle = nil
	if r.admin != nil {
		r.admin.Close()
		r.admin = nil
	}
}

// fail records the run's first failure and ends the run.
// benchStallAfter is how long a run may go without a completed task
// before it fails: a task lost or stuck ends the run with the counts, not
// a hang.
const benchStallAfter = 2 * time.Minute

// watchProgress fails the run when no task completed for stallAfter.
func (r *benchRun) watchProgress(ctx context.Context, stallAfter time.Duration) {
	t := time.NewTicker(stallAfter / 8)
	defer t.Stop()
	last, since := r.completed.Load(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if n := r.completed.Load(); n != last {
				last, since = n, now
			} else if now.Sub(since) >= stallAfter {
				r.fail(fmt.Errorf("no task completed for %v: %d of %d completed, %d claimed by producers", stallAfter, n, r.f.tasks, min(r.next.Load(), int64(r.f.tasks))))
				return
			}
		}
	}
}

// finish ends the run once every task is completed, recording the time
// and CPU then: the teardown of the workers' pending long-polls that the
// cancellation starts is not part of the measured run.
func (r *benchRun) finish() {
	r.doneOnce.Do(func() {
		r.doneAt, r.doneCPU, r.doneSwitches = time.Now(), processCPU(), processSwitches()
		r.stopRunProfile()
		r.doneGC, r.doneNd = readBenchGC(), readBenchNode(context.Background(), r.f.nodeMetricsURL)
		r.cancel()
	})
}

// startRunProfile starts the CPU profile and the execution trace of a
// single run's measured part (--cpuprofile, --trace without --suite;
// startProfiles covers a suite's CPU profile).
func (r *benchRun) startRunProfile() error {
	if r.f.suite {
		return nil
	}
	if r.f.cpuProfile != "" {
		stop, err := startCPUProfile(r.f.cpuProfile)
		if err != nil {
			return err
		}
		r.stopCPU = stop
	}
	if r.f.traceFile != "" {
		stop, err := startTrace(r.f.traceFile)
		if err != nil {
			r.stopRunProfile()
			return err
		}
		r.stopTrace = stop
	}
	return nil
}

// stopRunProfile ends the run's CPU profile and trace (once; at finish,
// or when a failed run returns).
func (r *benchRun) stopRunProfile() {
	r.cpuOnce.Do(func() {
		for _, stop := range []func(){r.stopCPU, r.stopTrace} {
			if stop != nil {
				stop()
			}
		}
	})
}

func (r *benchRun) fail(err error) {
	r.errOnce.Do(func() { r.firstErr = err; r.cancel() })
}

// produce enqueues batches of --batch tasks until every task index is
// claimed, stamping each task's enqueue time.
func (r *benchRun) produce(ctx context.Context) {
	batch := r.f.batch
	for {
		lo := int(r.next.Add(int64(batch))) - batch
		if lo >= r.f.tasks || !r.pace(ctx, lo) {
			return
		}
		hi := min(lo+batch, r.f.tasks)
		req := &pb.EnqueueRequest{Tasks: make([]*pb.NewTask, 0, hi-lo)}
		for i := lo; i < hi; i++ {
			req.Tasks = append(req.Tasks, &pb.NewTask{TaskId: "b-" + strconv.Itoa(i), ScanId: "bench", TargetRef: "target-" + strconv.Itoa(i)})
		}
		if err := benchEnqueue(ctx, r.prod, req, &r.errs); err != nil {
			if ctx.Err() == nil {
				r.fail(err)
			}
			return
		}
		now := time.Now().UnixNano()
		for i := lo; i < hi; i++ {
			r.enqueuedAt[i].Store(now)
		}
	}
}

// startWorkers starts the workers (in wg) and waits until each waits in
// its first Acquire, so that the measured run starts from a fleet's
// steady state between bursts: every worker connected and long-polling
// (an idle worker makes one Acquire per --wait-secs; with 1 024 workers
// the first ones cost 0.1–0.2 s of CPU, which a short run counted as if
// every worker polled once per run, docs/benchmarks.md). cpu is what
// the start cost, reported apart as workers_start_cpu_per_worker.
func (r *benchRun) startWorkers(ctx context.Context, wg *sync.WaitGroup) (cpu time.Duration, err error) {
	cpu0 := processCPU()
	for i, w := range r.workers {
		wg.Go(func() { r.work(ctx, "w"+strconv.Itoa(i), w) })
	}
	if err := r.waitLongPolls(ctx, int64(len(r.workers)), nil); err != nil {
		return 0, fmt.Errorf("workers' first Acquire: %w", err)
	}
	return processCPU() - cpu0, nil
}

// work acquires (and starts) up to --acquire tasks at a time as worker id
// and completes them, until every task is completed or the run ends; it
// then adds its latencies to the run's. The completions ride on the next
// Acquire, which then does not long-poll (the run is timed to its last
// acknowledged completion); with --single-calls they go in one
// CompleteMany of their own.
func (r *benchRun) work(ctx context.Context, id string, w *client.Client) {
	var lat benchLatencies
	defer func() {
		r.mu.Lock()
		r.leaseLat, r.e2eLat = append(r.leaseLat, lat.lease...), append(r.e2eLat, lat.e2e...)
		r.mu.Unlock()
	}()
	streak := 0
	var held []*pb.LeasedTask // leased and done, to complete with the next Acquire
	var leased time.Time
	for r.completed.Load() < int64(r.f.tasks) {
		areq := r.acquireRequest(id, held)
		ack := r.earlyAck(held, leased, &lat)
		acq, err := w.AcquireNotify(ctx, areq, ack.notify)
		if ack.done.Load() && !ack.ok {
			return
		}
		if ack.done.Load() {
			held = nil // NB: counted once; a retry must not complete them again
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if benchRetry(err, &streak, &r.errs) {
				continue // NB: held again: a replayed completion answers already_completed
			}
			r.fail(err)
			return
		}
		streak = 0
		if len(areq.GetComplete()) > 0 {
			// NB: completions above the client's call bound went ahead
			// in CompleteMany calls of their own.
			r.calls.complete.Add(int64(w.CompleteManyCalls(&pb.CompleteManyRequest{Items: areq.GetComplete()}) - 1))
		}
		if len(held) > 0 && !r.completedAll(held, acq.GetCompleted(), leased, &lat) {
			return
		}
		held = nil
		tasks := acq.GetTasks()
		r.calls.acquire.Add(1)
		if len(tasks) == 0 {
			r.calls.emptyAcquire.Add(1)
			continue
		}
		if !r.f.singleCalls {
			held, leased = tasks, time.Now()
			continue
		}
		if !r.complete(ctx, w, tasks, &lat) {
			return
		}
	}
}

// acquireRequest is worker id's next Acquire, completing held. It does
// not long-poll (the completions would be answered only with the next
// task), except over a worker session, which answers them at once.
func (r *benchRun) acquireRequest(id string, held []*pb.LeasedTask) *pb.AcquireRequest {
	req := &pb.AcquireRequest{WorkerId: id, MaxTasks: uint32(r.f.acquireMax), Start: true, WaitSecs: uint32(r.f.waitSecs), LeaseTtlSecs: uint64(r.f.leaseTTL)}
	if len(held) > 0 {
		req.Complete = r.completeItems(held)
		if !r.f.workerSession {
			req.WaitSecs = 0
		}
	}
	return req
}

// benchAck counts the completions a worker session answers before its
// Acquire's leases (client.AcquireNotify), once.
type benchAck struct {
	notify func([]*pb.CompleteItemResult) // nil: nothing held
	done   atomic.Bool                    // notify counted them
	ok     bool                           // completedAll's answer (set before done)
}

// earlyAck returns the ack of held's completions, leased at leased.
func (r *benchRun) earlyAck(held []*pb.LeasedTask, leased time.Time, lat *benchLatencies) *benchAck {
	a := &benchAck{}
	if len(held) == 0 {
		return a
	}
	a.notify = func(done []*pb.CompleteItemResult) {
		if a.done.Load() {
			return // a retry's replay: already counted
		}
		a.ok = r.completedAll(held, done, leased, lat)
		a.done.Store(true)
	}
	return a
}

// completeItems are the completions of tasks, each with the run's result.
func (r *benchRun) completeItems(tasks []*pb.LeasedTask) []*pb.CompleteRequest {
	items := make([]*pb.CompleteRequest, len(tasks))
	for j, t := range tasks {
		items[j] = &pb.CompleteRequest{LeaseToken: t.GetLeaseToken(), Result: r.result}
	}
	return items
}

// benchLatencies are one worker's acquire-to-complete and
// enqueue-to-complete latencies.
type benchLatencies struct{ lease, e2e []time.Duration }

// complete completes the acquired tasks in one CompleteMany (which the
// client may send as several calls, all counted). ok is false when the run
// must stop (the failure is recorded).
func (r *benchRun) complete(ctx context.Context, w *client.Client, tasks []*pb.LeasedTask, lat *benchLatencies) (ok bool) {
	leased := time.Now()
	req := &pb.CompleteManyRequest{Items: r.completeItems(tasks)}
	r.calls.complete.Add(int64(w.CompleteManyCalls(req)))
	cm, err := benchCompleteMany(ctx, w, req, &r.errs)
	if err != nil {
		if ctx.Err() == nil {
			r.fail(err)
		}
		return false
	}
	return r.completedAll(tasks, cm.GetResults(), leased, lat)
}

// completedAll checks the completions of tasks (leased at leased), counts
// them and appends each one's acquire-to-complete and enqueue-to-complete
// latency to lat; it ends the run once every task is completed. false:
// one failed, and the run with it.
func (r *benchRun) completedAll(tasks []*pb.LeasedTask, results []*pb.CompleteItemResult, leased time.Time, lat *benchLatencies) bool {
	done := time.Now()
	if len(results) != len(tasks) {
		r.fail(fmt.Errorf("%d completion results for %d tasks", len(results), len(tasks)))
		return false
	}
	for j, res := range results {
		if res.GetError() != nil {
			r.fail(errors.New("complete failed: " + res.GetError().GetKind()))
			return false
		}
		lat.lease = append(lat.lease, done.Sub(leased))
		if idx, err := strconv.Atoi(strings.TrimPrefix(tasks[j].GetTaskId(), "b-")); err == nil && idx < r.f.tasks {
			if at := r.enqueuedAt[idx].Load(); at != 0 {
				lat.e2e = append(lat.e2e, done.Sub(time.Unix(0, at)))
			}
		}
	}
	if r.completed.Add(int64(len(tasks))) >= int64(r.f.tasks) {
		r.finish()
	}
	return true
}

// benchEnqueue admits one batch, riding through leader changes. The batch's
// task IDs are unique to this run, so task_already_exists can only mean
// that an earlier try of this very batch was applied (all-or-nothing): the
// batch is in.
func benchEnqueue(ctx context.Context, prod *client.Client, req *pb.EnqueueRequest, errs *atomic.Int64) error {
	streak := 0
	for {
		_, err := prod.Enqueue(ctx, req)
		switch {
		case err == nil, errors.Is(err, distributed.ErrTaskAlreadyExists):
			return nil
		case connect.CodeOf(err) == connect.CodeResourceExhausted:
			time.Sleep(2 * time.Millisecond)
		case ctx.Err() != nil || !benchRetry(err, &streak, errs):
			return err
		}
	}
}

// benchCompleteMany completes a batch of leases, riding through leader
// changes (a replay of an applied completion answers already_completed).
func benchCompleteMany(ctx context.Context, w *client.Client, req *pb.CompleteManyRequest, errs *atomic.Int64) (*pb.CompleteManyResponse, error) {
	streak := 0
	for {
		cm, err := w.CompleteMany(ctx, req)
		if err == nil || ctx.Err() != nil || !benchRetry(err, &streak, errs) {
			return cm, err
		}
	}
}
