// Tests written for the fresh mutant set of issue 14 (scripts/mutants.txt,
// "Fresh set"): each names the mutant it kills.
package client

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"testing"
	"time"

	"connectrpc.com/connect"
)

// TestFresh_BackoffBounds: Backoff(attempt) lies in [d/2, d] where
// d = min·2^(attempt−1) capped at max, for every attempt and many draws.
// Kills fresh/client-backoff-uncapped (the cap dropped: 3ms doubles to 6ms
// past a 5ms max) and fresh/client-backoff-below-half (a draw in [0, d]).
func TestFresh_BackoffBounds(t *testing.T) {
	t.Parallel()
	const minD, maxD = 3 * time.Millisecond, 5 * time.Millisecond
	for attempt := 1; attempt <= 6; attempt++ {
		d := minD
		if attempt > 1 {
			d = maxD
		}
		for range 200 {
			if got := Backoff(attempt, minD, maxD); got < d/2 || got > d {
				t.Fatalf("Backoff(%d, %v, %v) = %v, want within [%v, %v]", attempt, minD, maxD, got, d/2, d)
			}
		}
	}
}

// TestFresh_RetryableTable pins the retry rule: an attempt deadline is
// retried only for a call that is safe to replay; Unavailable is retried
// unless the outcome is unknown and the call unsafe; nothing else is.
// Kills fresh/client-unsafe-timeout-retried and
// fresh/client-unknown-outcome-retried.
func TestFresh_RetryableTable(t *testing.T) {
	t.Parallel()
	unavailable := connect.NewError(connect.CodeUnavailable, errors.New("no leader"))
	unknown := connect.NewError(connect.CodeUnavailable, errors.New("leader did not answer"))
	unknown.Meta().Set(OutcomeHeader, OutcomeUnknown)
	exhausted := connect.NewError(connect.CodeResourceExhausted, errors.New("limit"))
	deadline := connect.NewError(connect.CodeDeadlineExceeded, errors.New("attempt deadline"))
	for _, c := range []struct {
		name           string
		err            error
		safe, timedOut bool
		want           bool
	}{
		{"timed out, safe", deadline, true, true, true},
		{"timed out, unsafe", deadline, false, true, false},
		{"unavailable, unsafe", unavailable, false, false, true},
		{"unavailable, safe", unavailable, true, false, true},
		{"outcome unknown, unsafe", unknown, false, false, false},
		{"outcome unknown, safe", unknown, true, false, true},
		{"resource exhausted, safe", exhausted, true, false, false},
		{"untrusted certificate, safe", connect.NewError(connect.CodeUnavailable, &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}), true, false, false},
		{"certificate refused by the node, safe", connect.NewError(connect.CodeUnavailable, &net.OpError{Op: "remote error", Err: errors.New("tls: bad certificate")}), true, false, false},
	} {
		if got := retryable(c.err, c.safe, c.timedOut); got != c.want {
			t.Errorf("%s: retryable = %v, want %v", c.name, got, c.want)
		}
	}
}
