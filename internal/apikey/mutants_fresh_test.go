// Tests written for the fresh mutant set of issue 14 (scripts/mutants.txt,
// "Fresh set"): each names the mutant it kills.
package apikey

import (
	"strings"
	"testing"
)

// TestFresh_ParseLengthBound pins MaxKeyBytes at its exact edge: a key of
// MaxKeyBytes bytes parses, one byte more is malformed.
// Kills fresh/apikey-length-bound-off-by-one (`len(key) > MaxKeyBytes+1`).
func TestFresh_ParseLengthBound(t *testing.T) {
	t.Parallel()
	head := Prefix + "0123456789abcdef_"
	atLimit := head + strings.Repeat("s", MaxKeyBytes-len(head))
	if len(atLimit) != MaxKeyBytes {
		t.Fatalf("test key is %d bytes, want %d", len(atLimit), MaxKeyBytes)
	}
	if _, secret, err := Parse(atLimit); err != nil || len(secret) != MaxKeyBytes-len(head) {
		t.Fatalf("Parse(%d-byte key) = %q, %v, want its secret", MaxKeyBytes, secret, err)
	}
	if _, _, err := Parse(atLimit + "s"); err != ErrMalformed {
		t.Fatalf("Parse(%d-byte key) = %v, want ErrMalformed", MaxKeyBytes+1, err)
	}
}
