package agent_test

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/termivar/distributed/agent"
	"github.com/termivar/distributed/client"
	"github.com/termivar/distributed/client/clienttest"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// Example writes a worker in Go: a producer enqueues two targets, an agent
// with an in-process handler scans them, and the producer reads the results
// in enqueue order. (clienttest stands in for a node here.)
func Example() {
	srv, err := clienttest.New(clienttest.Options{})
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	c, err := client.New(client.Config{ServerURL: srv.URL, Key: srv.Key})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	ctx := context.Background()
	if _, err := c.EnqueueTargets(ctx, client.EnqueueOptions{ScanID: "s1"}, slices.Values([]string{"b.example", "a.example"})); err != nil {
		panic(err)
	}

	a, err := agent.New(agent.Config{
		Client: c, WorkerID: "go-worker-1", Capacity: 2, PollWait: time.Second,
		Handler: func(ctx context.Context, t agent.Task) ([]byte, error) {
			return []byte("scanned " + t.Target), nil
		},
	})
	if err != nil {
		panic(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	for {
		p, err := c.ScanProgress(ctx, &pb.ScanProgressRequest{ScanId: "s1"})
		if err != nil {
			panic(err)
		}
		if p.GetCompleted() == p.GetTotal() {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop() // drain and deregister
	if err := <-done; err != nil {
		panic(err)
	}

	err = c.Results(ctx, "s1", func(_ string, result []byte) error {
		fmt.Println(string(result))
		return nil
	})
	if err != nil {
		panic(err)
	}
	// Output:
	// scanned b.example
	// scanned a.example
}
