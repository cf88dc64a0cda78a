package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/termivar/distributed/agent"
	"github.com/termivar/distributed/client"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/node"
)

// Demo settings: a short lease so the crashed worker's tasks come back
// within seconds.
const (
	demoWorkers   = 3
	demoCapacity  = 4
	demoLeaseTTL  = 2 * time.Second
	demoScan      = "demo-scan"
	demoCrashAt   = 40 // completions before worker 2 crashes
	demoFlakyEach = 25 // every 25th target fails its first attempt
)

func runDemo(ctx context.Context, env *cliEnv, args []string) error {
	var g globalFlags
	fs := newFlagSet(env, clientCommandNamed("demo"), &g, false)
	n := fs.Int("targets", 200, "number of targets to scan")
	keep := fs.Bool("keep", false, "keep the node's data directory")
	mtls := fs.Bool("mtls", false, "serve the API over mutual TLS (a CA and certificates made for this run)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *n < demoCrashAt*2 || *n > 1000 {
		return usagef("--targets must be %d-1000", demoCrashAt*2)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	start := time.Now()
	// The progress bar and the crash notice write from two goroutines.
	out := &syncWriter{w: env.stdout}
	dir, err := os.MkdirTemp("", "termivar-demo-")
	if err != nil {
		return err
	}
	if *keep {
		fmt.Fprintf(out, "data directory: %s\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}

	fmt.Fprintln(out, "== starting an embedded node (one-voter raft cluster on loopback)")
	var certs *demoTLS
	if *mtls {
		if certs, err = newDemoTLS(); err != nil {
			return err
		}
	}
	// NB: a quick recovery ticker so the crashed worker's expired leases go
	// back to the queue within a fraction of a second of expiring.
	node, err := startEmbedded(ctx, node.Config{DataDir: dir, RaftAddr: "127.0.0.1:0", TickInterval: 250 * time.Millisecond}, certs, false)
	if err != nil {
		return fmt.Errorf("start embedded node: %w", err)
	}
	defer node.Close()
	fmt.Fprintf(out, "   serving the API on %s\n", node.URL)
	c, err := client.New(client.Config{ServerURL: node.URL, Key: node.Key, HTTPClient: node.HTTPClient})
	if err != nil {
		return err
	}
	defer c.Close()
	if certs != nil {
		if err := showMutualTLS(ctx, out, node, certs); err != nil {
			return err
		}
	}

	d := &demo{c: c, out: out}
	fmt.Fprintf(out, "== starting %d workers, %d tasks each at once, %s leases\n", demoWorkers, demoCapacity, demoLeaseTTL)
	if err := d.startWorkers(ctx); err != nil {
		return err
	}
	defer d.stopWorkers()

	targets := make([]string, *n)
	for i := range targets {
		targets[i] = fmt.Sprintf("10.0.%d.%d", i/250, i%250+1)
	}
	res, err := c.EnqueueTargets(ctx, client.EnqueueOptions{ScanID: demoScan, Priority: "normal", Phases: []byte{1, 2}}, slices.Values(targets))
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "== enqueued %d targets as scan %s; every %dth target fails its first attempt\n", res.Enqueued, demoScan, demoFlakyEach)
	fmt.Fprintf(out, "== worker w2 will crash after %d tasks are done\n", demoCrashAt)

	crashed := make(chan int, 1)
	go d.crashWhen(ctx, crashed)
	// NB: the summary below reports failed tasks itself.
	err = watchScan(ctx, c, watchOptions{scan: demoScan, interval: 200 * time.Millisecond, stallAfter: 5 * time.Second}, out)
	if err != nil && !errors.As(err, new(scanFailedError)) {
		return err
	}
	held := <-crashed
	d.stopWorkers()
	return d.summary(ctx, held, time.Since(start))
}

// showMutualTLS proves the node requires a client certificate: a call with
// the admin key but no certificate is refused, one with it answers.
func showMutualTLS(ctx context.Context, out io.Writer, node *embeddedNode, certs *demoTLS) error {
	bare, err := client.New(client.Config{ServerURL: node.URL, Key: node.Key, HTTPClient: certs.bare, MaxAttempts: 1})
	if err != nil {
		return err
	}
	defer bare.Close()
	if _, err := bare.Status(ctx, &pb.StatusRequest{}); err == nil {
		return errors.New("demo: the node answered a client without a certificate")
	}
	fmt.Fprintln(out, "   mutual TLS: a client without a certificate is refused; the demo's clients present one signed by this run's CA")
	return nil
}

type demo struct {
	c      *client.Client
	out    io.Writer
	agents []*agent.Agent
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
	done   atomic.Int64 // tasks completed by handlers
}

func (d *demo) startWorkers(ctx context.Context) error {
	ctx, d.cancel = context.WithCancel(ctx)
	for i := 1; i <= demoWorkers; i++ {
		a, err := agent.New(agent.Config{
			Client: d.c, WorkerID: fmt.Sprintf("w%d", i), Capacity: demoCapacity, Tags: []string{"linux"},
			LeaseTTL: demoLeaseTTL, HeartbeatInterval: time.Second, PollWait: 2 * time.Second, Grace: time.Second,
			Handler: d.scan, Logger: slog.New(slog.DiscardHandler),
			// NB: the demo's workers simulate their scans, so they report
			// a simulated load instead of this machine's: under a busy
			// machine the node would otherwise scale their capacity down
			// and the demo would crawl.
			UtilizationFunc: func() (uint32, uint32) { return 1500, 2000 },
		})
		if err != nil {
			return err
		}
		d.agents = append(d.agents, a)
		d.wg.Go(func() { _ = a.Run(ctx) })
	}
	return nil
}

func (d *demo) stopWorkers() {
	d.once.Do(func() {
		d.cancel()
		d.wg.Wait()
	})
}

// scan is the simulated scanner: 100-300 ms of "work", a made-up finding
// derived from the target, and a transient failure on the first attempt of
// every demoFlakyEach-th target.
func (d *demo) scan(ctx context.Context, t agent.Task) ([]byte, error) {
	h := sha256.Sum256([]byte(t.Target))
	select {
	case <-time.After(time.Duration(100+int(h[0])%200) * time.Millisecond):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if int(h[1])%demoFlakyEach == 0 && t.Attempt == 1 {
		return nil, errors.New("connection reset (simulated)")
	}
	d.done.Add(1)
	return fmt.Appendf(nil, "%s open=%d", t.Target, h[2]%4), nil
}

// crashWhen crashes worker w2 once demoCrashAt tasks are done and it holds
// leases, and sends how many it held.
func (d *demo) crashWhen(ctx context.Context, crashed chan<- int) {
	w2 := d.agents[1]
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			crashed <- 0
			return
		case <-t.C:
		}
		if d.done.Load() >= demoCrashAt && w2.Running() > 0 {
			held := w2.Running()
			w2.Crash()
			fmt.Fprintf(d.out, "\n!! worker w2 crashed while running %d tasks; their leases expire in %s and go back to the queue\n", held, demoLeaseTTL)
			crashed <- held
			return
		}
	}
}

func (d *demo) summary(ctx context.Context, held int, took time.Duration) error {
	var tasks, retries, multi int
	err := d.c.EachTask(ctx, &pb.ListTasksRequest{ScanId: demoScan}, func(t *pb.TaskInfo) error {
		tasks++
		retries += int(t.GetRetryCount())
		if t.GetAttempt() > 1 {
			multi++
		}
		return nil
	})
	if err != nil {
		return err
	}
	var results, open int
	var first, last string
	err = d.c.Results(ctx, demoScan, func(_ string, r []byte) error {
		results++
		var ip string
		var o int
		if _, err := fmt.Sscanf(string(r), "%s open=%d", &ip, &o); err == nil {
			open += o
		}
		if first == "" {
			first = string(r)
		}
		last = string(r)
		return nil
	})
	if err != nil {
		return err
	}
	p, err := d.c.ScanProgress(ctx, &pb.ScanProgressRequest{ScanId: demoScan})
	if err != nil {
		return err
	}
	var failedAttempts int
	var per []string
	for i, a := range d.agents {
		s := a.Stats()
		failedAttempts += int(s.Failed)
		per = append(per, fmt.Sprintf("w%d completed %d, failed %d", i+1, s.Completed, s.Failed))
	}
	w := d.out
	fmt.Fprintln(w, "== summary")
	fmt.Fprintf(w, "   tasks:        %d (%d completed, %d failed)\n", tasks, p.GetCompleted(), p.GetFailed())
	fmt.Fprintf(w, "   results:      %d in enqueue order (first %q, last %q), %d open ports in total\n", results, first, last, open)
	fmt.Fprintf(w, "   retries:      %d (%d tasks ran more than once)\n", retries, multi)
	fmt.Fprintf(w, "     failed attempts retried:  %d\n", failedAttempts)
	fmt.Fprintf(w, "     leases recovered:         %d (worker w2 crashed holding %d)\n", retries-failedAttempts, held)
	fmt.Fprintf(w, "   workers:      %s; %s; %s\n", per[0], per[1], per[2])
	fmt.Fprintf(w, "   took:         %s\n", took.Round(100*time.Millisecond))
	if results != tasks || p.GetCompleted() != uint32(tasks) {
		return errors.New("demo: not every task completed")
	}
	return nil
}

// syncWriter serializes writes to w.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
