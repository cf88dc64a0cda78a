// `bench` modes (issue 15): a short fixed-rate, single-call run with
// resident records and idle long-polls prints every mode's figures;
// --suite prints the table of ratios; out-of-range mode flags are usage
// errors.
package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/termivar/distributed/internal/metrics"
)

// testLeaseTTL is the tests' --lease-ttl-secs: under -race at load a
// wait-0 Acquire (one carrying completions) can outlast its 1 s attempt
// deadline; the client re-issues it and the tasks the first try leased
// come back only when their leases expire (enqueue_to_complete_p99 was
// 31 s with the default 30 s, a 50 s run instead of 8 s). 10 s stays
// well above the runs' acquire_to_complete_p99 (≤ 3 s there).
const testLeaseTTL = "10"

func TestBench_Modes(t *testing.T) {
	prof := filepath.Join(t.TempDir(), "idle")
	args := []string{"--tasks", "300", "--batch", "1", "--acquire", "1", "--producers", "4", "--workers", "4", "--rate", "2000", "--resident", "600", "--idle-conns", "64",
		"--lease-ttl-secs", testLeaseTTL, "--idle-profile", prof}
	// dropAfter as --suite does: the scans, resident ones too, are deleted after the run
	res := runBenchArgs(t, args, true)
	s := res.String()
	for _, want := range []string{"rate=2000", "resident_records=600", "idle_conns=64 bytes_per_idle_conn="} {
		if !strings.Contains(s, want) {
			t.Errorf("no %q in:\n%s", want, s)
		}
	}
	// At most one Enqueue and one Acquire (carrying the completion) per
	// task: at least one log entry per three commands' worth of tasks, and
	// never more than the commands themselves (plus the ticker's few).
	if e := res.entriesPerTask(); e <= 0 || e > 3.5 {
		t.Errorf("raft_log_entries_per_task = %.3f, want in (0, 3.5]", e)
	}
	// 64 connections hold megabytes, far above the GC noise of a settled heap.
	if res.idle.bytes <= 0 {
		t.Errorf("bytes_per_idle_conn = %d, want > 0", res.idle.bytes)
	}
	// Each waiting Acquire parks at least its caller and the server's
	// handler (both ends of the loopback are in this process).
	if res.idle.goroutines < 2 {
		t.Errorf("goroutines_per_idle_conn = %.2f, want >= 2", res.idle.goroutines)
	}
	// Two parked goroutines hold at least a minimal stack each; the heap
	// holds the connections' buffers, so stacks are a part, not all.
	if res.idle.stackBytes <= 0 || res.idle.stackBytes >= res.idle.bytes {
		t.Errorf("stack_bytes_per_idle_conn = %d of %d, want in (0, bytes)", res.idle.stackBytes, res.idle.bytes)
	}
	checkIdleProfiles(t, prof)
	// The run allocated (its calls decode messages) and the collector's
	// line says so per task.
	if res.gc.allocObjects == 0 || res.gc.allocBytes == 0 || res.gc.goroutines == 0 || !strings.Contains(s, "allocs_per_task=") {
		t.Errorf("collector line missing or empty: %+v in:\n%s", res.gc, s)
	}
	t.Logf("\n%s", s)
}

// checkIdleProfiles checks that --idle-profile wrote a heap and a
// goroutine profile, each a parsable pprof file (gzip).
func checkIdleProfiles(t *testing.T, prefix string) {
	t.Helper()
	for _, ext := range []string{".heap", ".goroutine"} {
		b, err := os.ReadFile(prefix + ext)
		if err != nil {
			t.Errorf("--idle-profile: %v", err)
			continue
		}
		if len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
			t.Errorf("--idle-profile %s: %d bytes, not a gzipped profile", ext, len(b))
		}
	}
}

func TestBench_Suite(t *testing.T) {
	stop, url, key, err := startBenchNode(t.TempDir(), benchSnapshots{})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	var f benchFlags
	if err := newBenchFlagSet(&f).Parse([]string{"--suite"}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	saved, savedFloor := benchSuiteModes, floorCalls
	defer func() { benchSuiteModes, floorCalls = saved, savedFloor }()
	floorCalls = 2000
	for i := range benchSuiteModes {
		set := saved[i].set
		benchSuiteModes[i].set = func(f *benchFlags) {
			set(f)
			f.tasks, f.resident, f.idleConns = 200, min(f.resident, 400), min(f.idleConns, 4)
			f.leaseTTL, _ = strconv.Atoi(testLeaseTTL)
		}
	}
	if code := runBenchSuite(context.Background(), f, url, key, &out); code != exitOK {
		t.Fatalf("bench --suite = %d:\n%s", code, out.String())
	}
	s := out.String()
	rows := regexp.MustCompile(`(?m)^\s*(.+?)\s+(\d+)\s+([0-9.]+)\s+\S+\s+([0-9.]+)\s+([0-9.]+)\s`).FindAllStringSubmatch(s, -1)
	if len(rows) != len(benchSuiteModes)-1 { // the warm-up is not reported
		t.Fatalf("want %d table rows, got %d:\n%s", len(benchSuiteModes)-1, len(rows), s)
	}
	first, _ := strconv.ParseFloat(rows[0][3], 64)
	last, _ := strconv.ParseFloat(rows[len(rows)-1][3], 64)
	if m := (first + last) / 2; m < 0.99 || m > 1.01 {
		t.Errorf("the two defaults' ratios %s and %s average %.3f, want 1 (they are the base)", rows[0][3], rows[len(rows)-1][3], m)
	}
	if !regexp.MustCompile(`(?m)^rpc_floor: 2000 GetTask calls from 32 callers: [0-9]+ calls/s, CPU/call \S+; bound for 3 calls/task: [0-9]+ tasks/s`).MatchString(s) {
		t.Errorf("no rpc_floor line:\n%s", s)
	}
	t.Logf("\n%s", s)
}

func TestBench_ModeFlags(t *testing.T) {
	for _, args := range [][]string{{"--rate", "-1"}, {"--resident", "65000", "--tasks", "1000"}, {"--idle-conns", "1010", "--workers", "16"},
		{"--idle-conns", "4", "--embedded=false", "--server", "http://127.0.0.1:1"}} {
		if code := runBench(args); code != exitUsage {
			t.Errorf("bench %v = %d, want %d", args, code, exitUsage)
		}
	}
}

// TestBench_H2C: --h2c runs the load over HTTP/2 without TLS (its
// transport speaks nothing else, so a completed run proves it; every
// task completes, the idle long-polls measured), and refuses https URLs.
func TestBench_H2C(t *testing.T) {
	res := runBenchArgs(t, []string{"--tasks", "200", "--workers", "8", "--idle-conns", "64", "--h2c"}, false)
	if res.tasks != 200 || res.idle.bytes <= 0 {
		t.Fatalf("h2c run: %d tasks, %d bytes per idle conn", res.tasks, res.idle.bytes)
	}
	if _, err := h2cClient("http://127.0.0.1:1,https://127.0.0.1:2"); err == nil {
		t.Fatal("h2cClient accepted an https URL")
	}
}

// TestBench_SessionIdleGoroutines: an idle worker session waiting in an
// Acquire parks 5 goroutines, both ends of the loopback counted (the
// caller, the client's stream reader and its HTTP/2 body writer, the
// server's handler and the waiting message). It parked 7 before the
// server sent its response headers at the open (the client's Connect
// stream waited for them in a goroutine) and watched shutdown with
// context.AfterFunc (a goroutine per session).
func TestBench_SessionIdleGoroutines(t *testing.T) {
	res := runBenchArgs(t, []string{"--tasks", "100", "--workers", "4", "--idle-conns", "64", "--worker-session"}, false)
	if g := res.idle.goroutines; g < 4.5 || g > 5.5 {
		t.Fatalf("goroutines_per_idle_conn = %.2f with worker sessions, want 5", g)
	}
}

// runBenchArgs runs one bench with args against a fresh embedded node.
func runBenchArgs(t *testing.T, args []string, dropAfter bool) benchResult {
	t.Helper()
	var f benchFlags
	if err := newBenchFlagSet(&f).Parse(args); err != nil {
		t.Fatal(err)
	}
	f.dropAfter = dropAfter
	return runBenchFlags(t, f)
}

// runBenchFlags runs one bench with f against a fresh embedded node (its
// raft instruments in f.nodeMetrics when not nil).
func runBenchFlags(t *testing.T, f benchFlags) benchResult {
	t.Helper()
	stop, url, key, err := startBenchNodeMetrics(t.TempDir(), benchSnapshots{}, f.nodeMetrics)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	res, err := bench(context.Background(), f, url, key)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestBench_SingleCalls: one task per call, the bench's workers complete
// with their next Acquire (no CompleteMany) and its producers' Enqueues
// share calls (never more calls than tasks); with --single-calls every
// Enqueue is its own call and completions go in CompleteMany calls.
func TestBench_SingleCalls(t *testing.T) {
	stop, url, key, err := startBenchNode(t.TempDir(), benchSnapshots{})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	for _, single := range []bool{false, true} {
		var f benchFlags
		if err := newBenchFlagSet(&f).Parse([]string{"--tasks", "400", "--batch", "1", "--acquire", "1", "--producers", "8", "--workers", "4", "--lease-ttl-secs", testLeaseTTL}); err != nil {
			t.Fatal(err)
		}
		f.singleCalls, f.dropAfter = single, true
		res, err := bench(context.Background(), f, url, key)
		if err != nil {
			t.Fatal(err)
		}
		enq, completeMany := res.calls[0], res.calls[3]
		if single && (enq != 400 || completeMany == 0) || !single && (enq > 400 || completeMany != 0) {
			t.Errorf("single calls %v: %d Enqueue calls, %d CompleteMany calls for 400 tasks", single, enq, completeMany)
		}
	}
}

// TestBench_WorkerSession: with --worker-session the workers' Acquires
// (completions carried, long-polling) go as messages of one session
// each, never as Acquire or CompleteMany calls, and every task completes.
func TestBench_WorkerSession(t *testing.T) {
	res, paths := benchCountingPaths(t, "--worker-session")
	if res.tasks != 400 || res.calls[3] != 0 || paths.count("Acquire") != 0 || paths.count("CompleteMany") != 0 || paths.count("Session") != 4 {
		t.Fatalf("%d tasks; calls: CompleteMany %d, unary Acquire %d, unary CompleteMany %d, sessions %d", res.tasks, res.calls[3], paths.count("Acquire"), paths.count("CompleteMany"), paths.count("Session"))
	}
}

// TestBench_ProducerSession: with --producer-session the producers'
// Enqueues go as messages of one producer session, never as Enqueue or
// EnqueueMany calls; enqueue_calls counts the messages, and every task
// completes.
func TestBench_ProducerSession(t *testing.T) {
	res, paths := benchCountingPaths(t, "--producer-session")
	if res.tasks != 400 || paths.count("Enqueue") != 0 || paths.count("EnqueueMany") != 0 || paths.count("Session") != 1 || res.calls[0] < 1 || res.calls[0] > 400 {
		t.Fatalf("%d tasks; Enqueue %d, EnqueueMany %d, sessions %d, session messages %d", res.tasks, paths.count("Enqueue"), paths.count("EnqueueMany"), paths.count("Session"), res.calls[0])
	}
}

// TestBench_ChainLine: against an embedded node with its raft
// instruments each run reports its chain (entries' Apply-to-answer time,
// commands per entry, WAL stores), consistent with the run's log entries;
// without them (a --server node) the line is absent.
func TestBench_ChainLine(t *testing.T) {
	res, _ := benchCountingPaths(t, "--worker-session", metrics.New())
	c := res.chain
	if c.entries < 1 || c.commands < c.entries || c.stores < 1 || c.entrySecs <= 0 || c.storeSecs <= 0 || c.entries > float64(res.entries())+2 {
		t.Fatalf("chain %+v for %d log entries", c, res.entries())
	}
	if !strings.Contains(res.String(), "\nraft_entry_apply_to_answer_mean=") {
		t.Fatalf("no chain line in:\n%s", res)
	}
	if line := (benchChain{}).line(); line != "" || nodeChain(nil) != (benchChain{}) {
		t.Fatalf("without instruments: line %q", line)
	}
}

// benchCountingPaths runs 400 tasks, one per call (8 producers, 4
// workers), with flag on an embedded node (its raft instruments in reg
// when not nil) and returns the result and the requests by RPC name.
func benchCountingPaths(t *testing.T, flag string, reg ...*metrics.Registry) (benchResult, *pathCounter) {
	t.Helper()
	var f benchFlags
	if err := newBenchFlagSet(&f).Parse([]string{"--tasks", "400", "--batch", "1", "--acquire", "1", "--producers", "8", "--workers", "4", "--lease-ttl-secs", testLeaseTTL, flag}); err != nil {
		t.Fatal(err)
	}
	paths := &pathCounter{n: map[string]int{}}
	f.wrapTransport = func(next http.RoundTripper) http.RoundTripper { paths.next = next; return paths }
	if len(reg) > 0 {
		f.nodeMetrics = reg[0]
	}
	return runBenchFlags(t, f), paths
}

// pathCounter counts requests by RPC name.
type pathCounter struct {
	next http.RoundTripper
	mu   sync.Mutex
	n    map[string]int
}

func (p *pathCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	p.mu.Lock()
	p.n[r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]]++
	p.mu.Unlock()
	return p.next.RoundTrip(r)
}

func (p *pathCounter) count(rpc string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n[rpc]
}

// TestBench_ResidentReplyLost: the reply of the first resident Acquire is
// lost after the node leased its tasks (the try runs past its attempt
// deadline, as under -race at load, and is re-issued); those leases come
// back after --lease-ttl-secs and the run completes, instead of polling
// until they expire (600 s before).
func TestBench_ResidentReplyLost(t *testing.T) {
	var f benchFlags
	if err := newBenchFlagSet(&f).Parse([]string{"--tasks", "20", "--workers", "1", "--resident", "600", "--lease-ttl-secs", "2"}); err != nil {
		t.Fatal(err)
	}
	lost := &loseFirstAcquireReply{}
	f.wrapTransport = func(next http.RoundTripper) http.RoundTripper { lost.next = next; return lost }
	stop, url, key, err := startBenchNode(t.TempDir(), benchSnapshots{})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := bench(ctx, f, url, key)
	if err != nil {
		t.Fatal(err)
	}
	if !lost.done.Load() || res.tasks != 20 {
		t.Fatalf("reply lost %v, %d tasks", lost.done.Load(), res.tasks)
	}
}

// loseFirstAcquireReply lets the first Acquire reach the node and its
// reply come back, then drops the reply and answers when the try's
// deadline has passed.
type loseFirstAcquireReply struct {
	next http.RoundTripper
	done atomic.Bool
}

func (l *loseFirstAcquireReply) RoundTrip(r *http.Request) (*http.Response, error) {
	if !strings.HasSuffix(r.URL.Path, "/Acquire") || !l.done.CompareAndSwap(false, true) {
		return l.next.RoundTrip(r)
	}
	resp, err := l.next.RoundTrip(r)
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	<-r.Context().Done()
	return nil, r.Context().Err()
}

// TestBench_RetryTimeout: bench refuses an unreadable
// $TERMIVAR_RETRY_TIMEOUT and a negative --retry-timeout before it starts
// anything, and its calls try again for --retry-timeout as the CLI's do:
// with 0 the first call to an unreachable server is tried once, with a
// budget it is tried again until the budget has passed.
func TestBench_RetryTimeout(t *testing.T) {
	t.Setenv(envRetryTimeout, "soon")
	if code := runBench([]string{"--tasks", "10"}); code != exitUsage {
		t.Fatalf("bench with %s=soon = %d, want %d", envRetryTimeout, code, exitUsage)
	}
	t.Setenv(envRetryTimeout, "")
	if code := runBench([]string{"--tasks", "10", "--retry-timeout", "-1s"}); code != exitUsage {
		t.Fatalf("bench --retry-timeout -1s = %d, want %d", code, exitUsage)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now: every try is refused
	for _, tc := range []struct {
		budget   string
		retrying bool
	}{{"0s", false}, {"300ms", true}} {
		var f benchFlags
		if err := newBenchFlagSet(&f).Parse([]string{"--embedded=false", "--server", url, "--key", "k", "--retry-timeout", tc.budget}); err != nil {
			t.Fatal(err)
		}
		paths := &pathCounter{n: map[string]int{}}
		f.wrapTransport = func(next http.RoundTripper) http.RoundTripper { paths.next = next; return paths }
		if _, err := bench(context.Background(), f, url, "k"); err == nil {
			t.Fatalf("--retry-timeout %s: bench against %s succeeded", tc.budget, url)
		}
		if tries := paths.count("CreateTenant"); (tries > 1) != tc.retrying || tries == 0 {
			t.Fatalf("--retry-timeout %s: CreateTenant tried %d times", tc.budget, tries)
		}
	}
}
