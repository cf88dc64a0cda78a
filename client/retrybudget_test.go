// Tests of Config.RetryTimeout, the time-based retry budget. Goal: a call
// is retried past MaxAttempts until the budget is spent, a backoff never
// sleeps past it, and a call that is not safe to replay is still tried
// once after an unknown outcome. Method: scripted httptest nodes
// (failover_test.go) that fail a given number of tries.
package client_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/termivar/distributed/client"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// failFirst answers with fail for the first n tries, then succeeds.
func failFirst(n int64, fail func() error) func() error {
	var tries atomic.Int64
	return func() error {
		if tries.Add(1) <= n {
			return fail()
		}
		return nil
	}
}

func budgetClient(t *testing.T, url string, budget, minBackoff, maxBackoff time.Duration) *client.Client {
	t.Helper()
	c, err := client.New(client.Config{ServerURL: url, Key: "k", RetryTimeout: budget, MinBackoff: minBackoff, MaxBackoff: maxBackoff})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func TestClient_RetryTimeoutOutlastsMaxAttempts(t *testing.T) {
	t.Parallel()
	const failures = 20 // NB: 5× the default MaxAttempts
	unknown := map[string]string{client.OutcomeHeader: client.OutcomeUnknown}
	tests := []struct {
		name   string
		answer func() error
		safe   bool
		ok     bool
		want   int64
	}{
		{"not-leader/read", failFirst(failures, unavailable("not_leader", nil)), true, true, failures + 1},
		{"not-leader/create-key", failFirst(failures, unavailable("not_leader", nil)), false, true, failures + 1},
		{"outcome-unknown/read", failFirst(failures, unavailable("not_leader", unknown)), true, true, failures + 1},
		{"outcome-unknown/create-key", failFirst(failures, unavailable("not_leader", unknown)), false, false, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			n := newFakeNode(t, tt.answer)
			c := budgetClient(t, n.srv.URL, time.Minute, time.Millisecond, 2*time.Millisecond)
			var err error
			if tt.safe {
				_, err = c.GetTask(context.Background(), &pb.GetTaskRequest{TaskId: "t"})
			} else {
				_, err = c.CreateKey(context.Background(), &pb.CreateKeyRequest{Role: "worker"})
			}
			if (err == nil) != tt.ok || n.hits.Load() != tt.want {
				t.Fatalf("call = %v after %d tries, want ok=%v after %d", err, n.hits.Load(), tt.ok, tt.want)
			}
			if !tt.ok && !client.MayHaveApplied(err) {
				t.Fatalf("error %v does not say the call may have applied", err)
			}
		})
	}
}

func TestClient_RetryTimeoutBoundsTheCall(t *testing.T) {
	t.Parallel()
	n := newFakeNode(t, unavailable("not_leader", nil))
	// NB: a 10 s backoff, cut to what is left of the 200 ms budget.
	const budget = 200 * time.Millisecond
	c := budgetClient(t, n.srv.URL, budget, 10*time.Second, 10*time.Second)
	start := time.Now()
	_, err := c.GetTask(context.Background(), &pb.GetTaskRequest{TaskId: "t"})
	took := time.Since(start)
	if err == nil {
		t.Fatal("call succeeded against a failing node")
	}
	if took < budget || took > budget+5*time.Second {
		t.Fatalf("call took %v, want about the %v budget", took, budget)
	}
	if h := n.hits.Load(); h < 2 {
		t.Fatalf("tries = %d, want a retry within the budget", h)
	}
}

func TestClient_RetryTimeoutSkipsRefusedTLS(t *testing.T) {
	t.Parallel()
	var tries atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			tries.Add(1)
		}
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	// NB: the client does not trust the test server's certificate.
	c := budgetClient(t, srv.URL, time.Minute, time.Millisecond, 2*time.Millisecond)
	start := time.Now()
	_, err := c.GetTask(context.Background(), &pb.GetTaskRequest{TaskId: "t"})
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("GetTask against an untrusted certificate = %v", err)
	}
	if n, took := tries.Load(), time.Since(start); n != 1 || took > 30*time.Second {
		t.Fatalf("%d connections in %v, want 1 (a refused certificate is not retried)", n, took)
	}
}
