// Tests written for the fresh mutant set of issue 14 (scripts/mutants.txt,
// "Fresh set"): each names the mutant it kills.
package token

import (
	"errors"
	"testing"

	distributed "github.com/termivar/distributed"
)

// TestFresh_ZeroProofsRefused: a token that carries the zero value of a
// proof (it decodes: empty IDs, zero counters) is well-formed and correctly
// MACed, yet names no task; every Open* must refuse it as an invalid proof.
// Kills fresh/token-zero-lease-accepted (OpenLease without `|| l.IsZero()`).
func TestFresh_ZeroProofsRefused(t *testing.T) {
	t.Parallel()
	c := newCodec(t, testSecret, testEpoch)
	cases := []struct {
		name string
		open func() error
	}{
		{"lease", func() error { _, err := c.OpenLease("acme", c.SealLease("acme", distributed.TaskLease{})); return err }},
		{"fence", func() error {
			_, err := c.OpenFence("acme", c.SealFence("acme", distributed.QueuedTaskFence{}))
			return err
		}},
		{"receipt", func() error {
			_, err := c.OpenReceipt("acme", c.SealReceipt("acme", distributed.CompletionReceipt{}))
			return err
		}},
		{"ownership of lease", func() error {
			_, err := c.OpenOwnership("acme", c.SealLease("acme", distributed.TaskLease{}))
			return err
		}},
		{"ownership of fence", func() error {
			_, err := c.OpenOwnership("acme", c.SealFence("acme", distributed.QueuedTaskFence{}))
			return err
		}},
	}
	for _, tc := range cases {
		err := tc.open()
		var te *Error
		if !errors.Is(err, ErrInvalidToken) || !errors.As(err, &te) || te.Reason != ReasonInvalidProof {
			t.Errorf("%s: open of a zero proof = %v, want %q", tc.name, err, ReasonInvalidProof)
		}
	}
}
