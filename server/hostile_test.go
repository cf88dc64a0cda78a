// Hostile load. Goal: under a flood of unauthenticated clients the node
// keeps answering an authenticated client quickly and keeps its memory
// bounded (issue 9: "20 000 hostile connections, 16 unauthenticated 40 MB
// bodies and a gzip bomb in flight at once"). Method: the server runs in
// this process on a real loopback listener, behind LimitListener and
// HTTPServer's timeouts, with default Limits. The attackers run in child
// processes (this test binary re-executed, hostileChild), so their file
// descriptors do not count against the server's limit and the server's
// RSS is measured alone: two children hold 10 000 connections each from 40
// source addresses each (half send complete headers of a 40 MB
// Worker.Complete and never the body, half stall inside the headers), one
// child streams 16 unauthenticated 40 MB bodies in a loop, plus an
// unauthenticated 8 MiB gzip bomb (8 GiB inflated) in a loop and an
// authenticated one twice a second, each over its own HTTP/2 connection
// made before the flood.
// Meanwhile an authenticated producer on its own connection calls Enqueue
// (900 tasks, then ScanProgress) and GetTask in turn; every call must
// succeed within its 10 s deadline (the slowest and p99 are logged, not
// asserted: docs/benchmarks.md has the figures), and the
// server's peak RSS (VmHWM) must stay below 500 MB (hostileBounds; wider
// under the race detector). -short scales the connections down to
// 2 × 1000.
package server

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/gen/termivar/v1/termivarv1connect"
)

// Environment of a hostile child process.
const (
	envHostileRole = "TERMIVAR_HOSTILE_ROLE" // "conns" or "bodies"
	envHostileAddr = "TERMIVAR_HOSTILE_ADDR"
	envHostileN    = "TERMIVAR_HOSTILE_N"   // conns: connections to hold
	envHostileNet  = "TERMIVAR_HOSTILE_NET" // conns: source prefix, e.g. 127.0.1
	envHostileKey  = "TERMIVAR_HOSTILE_KEY" // bodies: producer key for the authenticated bomb
)

// hostileBounds returns the peak RSS the test asserts: 500 MB; under the
// race detector (several times the memory) 2 GB. NB: the RSS is mostly garbage between GC
// cycles: each refused HTTP/2 stream has already been sent up to its
// receive window (1 MiB) of body, and the heap goal is twice the live
// heap, which the 4096 held connections' buffers dominate.
func hostileBounds() (maxHWMKB int64) {
	if raceEnabled {
		return 2000 << 10
	}
	return 500 << 10
}

func TestServer_HostileLoad(t *testing.T) {
	conns := 10_000
	if testing.Short() {
		conns = 1000
	}
	b := setup(t, nil)
	s := b.api
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := s.HTTPServer("")
	served := make(chan struct{})
	ll := s.LimitListener(ln).(*limitListener)
	go func() { defer close(served); _ = hs.Serve(ll) }()
	t.Cleanup(func() { hs.Close(); <-served })
	addr := ln.Addr().String()
	pk := b.createKey(t, "", "producer")

	// The authenticated producer's connection exists before the attack.
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &p, DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}}).DialContext}
	defer tr.CloseIdleConnections()
	prod := termivarv1connect.NewProducerClient(&http.Client{Transport: tr}, "http://"+addr, connect.WithInterceptors(authInterceptor{pk}))
	if _, err := prod.Enqueue(ctx, req(enqueueReq("warm", "w0"))); err != nil {
		t.Fatal(err)
	}
	// NB: "5" resets VmHWM to the current RSS (Linux ≥ 4.0), so earlier
	// tests of this binary do not count.
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Logf("VmHWM not reset (%v): it covers the whole test binary", err)
	}
	rss0, _ := procStatusKB("VmRSS")
	cpu0 := cpuTime()

	bodies := startHostile(t, map[string]string{envHostileRole: "bodies", envHostileAddr: addr, envHostileKey: pk})
	bodies.waitReady(t, -1) // its connections exist before the flood
	var ready sync.WaitGroup
	var children []*hostileChild
	for i, prefix := range []string{"127.0.1", "127.0.2"} {
		c := startHostile(t, map[string]string{envHostileRole: "conns", envHostileAddr: addr, envHostileN: strconv.Itoa(conns), envHostileNet: prefix})
		children = append(children, c)
		ready.Add(1)
		go func() { defer ready.Done(); c.waitReady(t, i) }()
	}
	allReady := make(chan struct{})
	go func() { ready.Wait(); close(allReady) }()

	// Authenticated calls for as long as the connections are being made,
	// and 3 s after they are all held; each call is timed.
	var lat []time.Duration
	var slowestD time.Duration
	slowest := ""
	timed := func(what string, call func(context.Context) error) {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		start := time.Now()
		err := call(cctx)
		d := time.Since(start)
		if err != nil {
			t.Fatalf("authenticated %s failed under load after %v: %v", what, d, err)
		}
		if d > slowestD {
			slowestD, slowest = d, what
		}
		lat = append(lat, d)
	}
	var peakRSS int64
	end := time.Time{}
	for i := 0; end.IsZero() || time.Now().Before(end); i++ {
		select {
		case <-allReady:
			if end.IsZero() {
				end = time.Now().Add(3 * time.Second)
			}
		default:
		}
		// Enqueue while the tenant has room (default limits), then reads.
		id := "t" + strconv.Itoa(i%900)
		if i < 900 {
			timed("Enqueue", func(c context.Context) error { _, err := prod.Enqueue(c, req(enqueueReq("hostile", id))); return err })
		} else {
			timed("ScanProgress", func(c context.Context) error {
				_, err := prod.ScanProgress(c, req(&pb.ScanProgressRequest{ScanId: "hostile"}))
				return err
			})
		}
		timed("GetTask", func(c context.Context) error {
			_, err := prod.GetTask(c, req(&pb.GetTaskRequest{TaskId: id}))
			return err
		})
		if r, ok := procStatusKB("VmRSS"); ok && r > peakRSS {
			peakRSS = r
		}
		if i > 200_000 {
			t.Fatal("the attack did not get going")
		}
	}
	hwm, _ := procStatusKB("VmHWM")
	cpu := cpuTime() - cpu0
	stats := []string{bodies.stop(t)}
	for _, c := range children {
		stats = append(stats, c.stop(t))
	}
	maxLat, p99 := latencyStats(lat)
	t.Logf("authenticated calls (Enqueue or ScanProgress, then GetTask): %d, slowest %v (%s), p99 %v", len(lat), maxLat, slowest, p99)
	t.Logf("server RSS before %d MB, peak sampled %d MB, VmHWM %d MB; server process CPU during the attack %v", rss0>>10, peakRSS>>10, hwm>>10, cpu)
	t.Logf("listener: peak open %d, refused per source %d", ll.peak.Load(), ll.refused.Load())
	for _, st := range stats {
		t.Logf("attacker: %s", st)
	}
	// Latency is logged, not asserted (a shared machine makes any bound
	// flaky; the figures live in docs/benchmarks.md): the check is that no
	// authenticated call failed or ran into its 10 s deadline (timed).
	maxHWMKB := hostileBounds()
	if hwm > maxHWMKB {
		t.Errorf("VmHWM %d MB, want below %d MB (race detector: %v)", hwm>>10, maxHWMKB>>10, raceEnabled)
	}
}

func latencyStats(lat []time.Duration) (maxLat, p99 time.Duration) {
	sorted := slices.Clone(lat)
	slices.Sort(sorted)
	return sorted[len(sorted)-1], sorted[len(sorted)*99/100]
}

// procStatusKB returns a kB field of /proc/self/status.
func procStatusKB(field string) (int64, bool) {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	for _, ln := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(ln, field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// hostileChild is a running attacker process.
type hostileChild struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Scanner
	last  string
}

func startHostile(t *testing.T, env map[string]string) *hostileChild {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &hostileChild{cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout)}
	t.Cleanup(func() { c.stdin.Close(); _ = c.cmd.Process.Kill(); _ = c.cmd.Wait() })
	return c
}

// waitReady waits for the child's "ready" line.
func (c *hostileChild) waitReady(t *testing.T, i int) {
	for c.out.Scan() {
		c.last = c.out.Text()
		if strings.HasPrefix(c.last, "ready") {
			return
		}
	}
	t.Errorf("attacker %d ended before it was ready", i)
}

// stop ends the child (stdin closed) and returns its last report line.
func (c *hostileChild) stop(t *testing.T) string {
	c.stdin.Close()
	for c.out.Scan() {
		c.last = c.out.Text()
	}
	if err := c.cmd.Wait(); err != nil {
		t.Errorf("attacker: %v", err)
	}
	return c.last
}

// hostileChild runs the attacker role named in the environment; it
// returns the exit code. It stops when its stdin closes.
func runHostileChild() int {
	addr := os.Getenv(envHostileAddr)
	done := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); close(done) }()
	switch os.Getenv(envHostileRole) {
	case "conns":
		n, _ := strconv.Atoi(os.Getenv(envHostileN))
		return holdConns(addr, os.Getenv(envHostileNet), n, done)
	case "bodies":
		return sendBodies(addr, os.Getenv(envHostileKey), done)
	}
	return 2
}

// holdConns opens n connections from 40 source addresses prefix.1-40 and
// holds them: even ones send complete headers of a 40 MB Complete and never
// the body, odd ones stop inside the headers.
func holdConns(addr, prefix string, n int, done <-chan struct{}) int {
	var established, failed atomic.Int64
	var mu sync.Mutex
	var held []net.Conn
	sem := make(chan struct{}, 256)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			d := net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(fmt.Sprintf("%s.%d", prefix, 1+i%40))}}
			c, err := d.Dial("tcp", addr)
			if err != nil {
				failed.Add(1)
				return
			}
			head := "POST /termivar.v1.Worker/Complete HTTP/1.1\r\nHost: x\r\nContent-Type: application/proto\r\n"
			if i%2 == 0 {
				head += "Content-Length: 41943040\r\n\r\n"
			}
			if _, err := c.Write([]byte(head)); err != nil {
				failed.Add(1)
				c.Close()
				return
			}
			established.Add(1)
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}()
	}
	wg.Wait()
	fmt.Printf("ready established=%d failed=%d\n", established.Load(), failed.Load())
	<-done
	for _, c := range held {
		c.Close()
	}
	fmt.Printf("conns: established=%d failed=%d\n", established.Load(), failed.Load())
	return 0
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// sendBodies streams 16 unauthenticated 40 MB Complete bodies in a loop
// (each from its own source address), an unauthenticated gzip bomb and an
// authenticated one, until done; it counts the answers by status.
func sendBodies(addr, key string, done <-chan struct{}) int {
	var one bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&one, gzip.BestCompression)
	_, _ = zw.Write(make([]byte, 64<<20))
	zw.Close()
	bombBytes := bytes.Repeat(one.Bytes(), 128) // ~8 MiB, 8 GiB inflated
	var mu sync.Mutex
	answers := map[string]int{}
	var wg, warm sync.WaitGroup
	// Each sender has its own HTTP/2 (h2c) connection, made before the
	// connection flood starts, so its bodies reach the server while the
	// accept queue is full; a refusal resets only the stream.
	loop := func(name, src, path, key string, body func() io.Reader, gz bool, pause time.Duration) {
		defer wg.Done()
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		tr := &http.Transport{Protocols: &p, DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}).DialContext}
		defer tr.CloseIdleConnections()
		if res, err := (&http.Client{Transport: tr}).Get("http://" + addr + "/healthz"); err == nil {
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
		warm.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			r, _ := http.NewRequest(http.MethodPost, "http://"+addr+path, body())
			r.Header.Set("Content-Type", "application/proto")
			if gz {
				r.Header.Set("Content-Encoding", "gzip")
			}
			if key != "" {
				r.Header.Set("Authorization", "Bearer "+key)
			}
			res, err := tr.RoundTrip(r)
			label := name + " cut off"
			if err == nil {
				label = name + " " + strconv.Itoa(res.StatusCode)
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
			}
			mu.Lock()
			answers[label]++
			mu.Unlock()
			select {
			case <-done:
			case <-time.After(pause):
			}
		}
	}
	warm.Add(18)
	wg.Add(18)
	for i := range 16 {
		go loop("unauthenticated 40MB body", fmt.Sprintf("127.0.3.%d", i+1), "/termivar.v1.Worker/Complete", "",
			func() io.Reader { return io.LimitReader(zeros{}, 40<<20) }, false, 0)
	}
	go loop("unauthenticated bomb", "127.0.3.100", "/termivar.v1.Producer/Enqueue", "", func() io.Reader { return bytes.NewReader(bombBytes) }, true, 0)
	// NB: an authenticated client may spend the server's CPU within its
	// request limit; this one proves the inflate bound, at 2 bombs a second.
	go loop("authenticated bomb", "127.0.3.101", "/termivar.v1.Producer/Enqueue", key, func() io.Reader { return bytes.NewReader(bombBytes) }, true, 500*time.Millisecond)
	warm.Wait()
	fmt.Println("ready")
	wg.Wait()
	fmt.Printf("bodies and bombs: %v\n", answers)
	return 0
}
