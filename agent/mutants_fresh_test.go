// Tests written for the fresh mutant set of issue 14 (scripts/mutants.txt,
// "Fresh set"): each names the mutant it kills.
package agent

import (
	"context"
	"errors"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/termivar/distributed/client"
)

// TestFresh_BoundedBufferExactFit: output of exactly max bytes is kept
// whole and is not "too large"; one byte more is. Kills
// fresh/agent-exact-fit-output-flagged (`len(p) >= room`).
func TestFresh_BoundedBufferExactFit(t *testing.T) {
	t.Parallel()
	b := &boundedBuffer{max: 4}
	if n, err := b.Write([]byte("ab")); n != 2 || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	b.Write([]byte("cd"))
	if b.over || string(b.buf) != "abcd" {
		t.Fatalf("after exactly max bytes: buf %q, over %v; want \"abcd\", false", b.buf, b.over)
	}
	if n, err := b.Write([]byte("e")); n != 1 || err != nil || !b.over || string(b.buf) != "abcd" {
		t.Fatalf("one byte past max: n %d, err %v, buf %q, over %v; want 1, nil, \"abcd\", true", n, err, b.buf, b.over)
	}
}

// TestFresh_RetryUntilStopsAtDeadline: once the deadline has passed, an
// unreachable server is not retried (the lease is gone by then): fn runs
// once and its error is returned. Kills
// fresh/agent-report-retries-past-deadline (the deadline check dropped:
// retryUntil would back off and call again until ctx ends).
func TestFresh_RetryUntilStopsAtDeadline(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	unreachable := &client.Error{Op: "Worker.Complete", Code: connect.CodeUnavailable}
	calls := 0
	err := retryUntil(ctx, time.Now().Add(-time.Second), func() error {
		calls++
		if calls > 1 {
			cancel() // end the test promptly on the mutant
		}
		return unreachable
	})
	if calls != 1 || !errors.Is(err, unreachable) {
		t.Fatalf("retryUntil past the deadline: %d calls, err %v; want 1 call and the unreachable error", calls, err)
	}
}
