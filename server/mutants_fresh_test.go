// Tests written for the fresh mutant set of issue 14 (scripts/mutants.txt,
// "Fresh set"): each names the mutant it kills.
package server

import (
	"errors"
	"net"
	"testing"
	"time"
)

// TestFresh_ThrottleRefillCappedAtBurst: a source idle for a long time
// regains at most burst failures, never credit for the whole idle time.
// Kills fresh/throttle-refill-uncapped (level without `min(t.burst, …)`:
// after 100 s idle a burst-2 source could fail 100 times unthrottled).
func TestFresh_ThrottleRefillCappedAtBurst(t *testing.T) {
	t.Parallel()
	th := newFailureThrottle(2, time.Second, 10)
	t0 := time.Unix(100, 0)
	th.fail("a", t0)
	t1 := t0.Add(100 * time.Second)
	th.fail("a", t1)
	if d := th.retryAfter("a", t1); d != 0 {
		t.Fatalf("after one failure of a refilled burst of 2: retry after %v, want 0", d)
	}
	th.fail("a", t1)
	if d := th.retryAfter("a", t1); d != time.Second {
		t.Fatalf("after the burst of 2 failures: retry after %v, want 1s", d)
	}
}

// TestFresh_LimitListenerCloseFreesSlot: closing an accepted connection
// gives its slot back, so with a total bound of one a second connection is
// accepted after the first closes. Kills fresh/connlimit-close-keeps-slot
// (release without `<-l.sem`). The wait is bounded (10 s, generous) so the
// mutant fails the test instead of hanging it; the listener is closed
// then, which ends the Accept.
func TestFresh_LimitListenerCloseFreesSlot(t *testing.T) {
	t.Parallel()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := newLimitListener(inner, 1, 10)
	defer l.Close()
	accept := func() (net.Conn, error) {
		type res struct {
			c   net.Conn
			err error
		}
		ch := make(chan res, 1)
		go func() { c, err := l.Accept(); ch <- res{c, err} }()
		select {
		case r := <-ch:
			return r.c, r.err
		case <-time.After(10 * time.Second):
			l.Close()
			<-ch
			return nil, errors.New("no connection accepted within 10 s")
		}
	}
	for i := range 2 {
		c, err := net.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		s, err := accept()
		if err != nil {
			t.Fatalf("connection %d: %v", i+1, err)
		}
		s.Close()
	}
	if o := l.open.Load(); o != 0 {
		t.Fatalf("open = %d after both connections closed, want 0", o)
	}
}
