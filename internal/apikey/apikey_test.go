// Tests for key generation, parsing, verification and the permission table.
package apikey

import (
	"bytes"
	"strings"
	"testing"
)

func TestGenerate_VerifyRoundTrip(t *testing.T) {
	t.Parallel()
	g, err := Generate(nil)
	if err != nil {
		t.Fatal(err)
	}
	id, secret, err := Parse(g.Key)
	if err != nil || id != g.ID {
		t.Fatalf("Parse(key) = %q, %v, want id %q", id, err, g.ID)
	}
	if !Verify(g.Hash[:], secret) {
		t.Fatal("Verify(hash, secret) = false, want true")
	}
	if Verify(g.Hash[:], secret+"x") || Verify(g.Hash[:1], secret) {
		t.Fatal("Verify accepted a wrong secret or hash")
	}
	if strings.Contains(g.ID, secret) {
		t.Fatal("key ID contains the secret")
	}
	g2, _ := Generate(nil)
	if g2.Key == g.Key || g2.ID == g.ID {
		t.Fatal("two generated keys are equal")
	}
}

func TestGenerate_Deterministic(t *testing.T) {
	t.Parallel()
	a, _ := Generate(bytes.NewReader(make([]byte, 40)))
	b, _ := Generate(bytes.NewReader(make([]byte, 40)))
	if a != b || !ValidID(a.ID) {
		t.Fatalf("Generate(zero reader) = %+v, %+v", a, b)
	}
	if _, err := Generate(bytes.NewReader(make([]byte, 10))); err == nil {
		t.Fatal("Generate(short reader) = nil error")
	}
}

func TestParse_Malformed(t *testing.T) {
	t.Parallel()
	for _, k := range []string{
		"", "tvk_", "abc", "tvk_0123456789abcdef", "tvk_0123456789abcdef_",
		"tvk_0123456789ABCDEF_x", "tvk_0123456789abcdeg_x", "xvk_0123456789abcdef_x",
		"tvk_0123456789abcdefxsecret", "tvk_0123456789abcdef_" + strings.Repeat("a", 200),
	} {
		if _, _, err := Parse(k); err != ErrMalformed {
			t.Errorf("Parse(%q) = %v, want ErrMalformed", k, err)
		}
	}
}

func TestAllowed(t *testing.T) {
	t.Parallel()
	cases := []struct {
		role            Role
		service, method string
		want            bool
	}{
		{RoleAdmin, "Admin", "CreateKey", true},
		{RoleAdmin, "Worker", "Acquire", true},
		{RoleAdmin, "Producer", "Enqueue", true},
		{RoleProducer, "Producer", "Enqueue", true},
		{RoleProducer, "Worker", "Acquire", false},
		{RoleProducer, "Admin", "CreateKey", false},
		{RoleProducer, "Admin", "Status", true},
		{RoleWorker, "Worker", "Complete", true},
		{RoleWorker, "Producer", "Enqueue", false},
		{RoleWorker, "Admin", "ListWorkers", false},
		{Role(0), "Admin", "Status", false},
		{RoleAdmin, "Other", "X", false},
		{RoleAdmin, "Cluster", "Join", true},
		{RoleProducer, "Cluster", "Members", false},
		{RoleWorker, "Cluster", "Join", false},
		{RoleWorker, "Dashboard", "Overview", true},
		{RoleProducer, "Dashboard", "Overview", true},
		{RoleAdmin, "Dashboard", "Overview", true},
		{Role(0), "Dashboard", "Overview", false},
	}
	for _, tc := range cases {
		if got := Allowed(tc.role, tc.service, tc.method); got != tc.want {
			t.Errorf("Allowed(%v, %s, %s) = %v, want %v", tc.role, tc.service, tc.method, got, tc.want)
		}
	}
	for _, r := range AllRoles() {
		if p, ok := ParseRole(r.String()); !ok || p != r {
			t.Errorf("ParseRole(%s) = %v, %v", r, p, ok)
		}
	}
}
