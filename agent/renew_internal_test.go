package agent

import (
	"testing"
	"time"
)

// The documented cadence is a third of the TTL: two renewals may fail
// before a lease runs out. Mutant killed: renewal every TTL/2 (task.go).
func TestRenewInterval_IsAThirdOfTheTTL(t *testing.T) {
	for _, c := range []struct{ ttl, want time.Duration }{
		{3 * time.Second, time.Second},
		{60 * time.Second, 20 * time.Second},
		{2 * time.Second, 2 * time.Second / 3},
	} {
		if got := renewInterval(c.ttl); got != c.want {
			t.Errorf("renewInterval(%v) = %v, want %v", c.ttl, got, c.want)
		}
	}
}
