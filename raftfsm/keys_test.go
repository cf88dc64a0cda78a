// Tests for the key table's commands. Goal: RevokeKey and RotateKey take a
// key out of service in one command (no later command of its principal
// applies), move or drop its worker bindings, refuse every bad request
// without changing anything (byte-identical ExportState), never reuse an
// ID, keep the system tenant's last admin key, respect the table bound, and
// survive a snapshot round trip. Method: ApplyCommand on hand-built
// commands, as in fsm_test.go.
package raftfsm

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/termivar/distributed/gen/termivar/v1"
)

func createKeyCmd(principal, id, tenant, role string) *pb.Command {
	return &pb.Command{Principal: principal, Op: &pb.Command_CreateKey{CreateKey: &pb.CreateKey{KeyId: id, SecretHash: bytes.Repeat([]byte{7}, 32), KeyTenant: tenant, Role: role}}}
}

func revokeCmd(principal, id string) *pb.Command {
	return &pb.Command{Principal: principal, Op: &pb.Command_RevokeKey{RevokeKey: &pb.RevokeKey{KeyId: id}}}
}

func rotateCmd(principal, id, newID string, hash []byte) *pb.Command {
	return &pb.Command{Principal: principal, Op: &pb.Command_RotateKey{RotateKey: &pb.RotateKey{KeyId: id, NewKeyId: newID, NewSecretHash: hash}}}
}

// keysSetup is setup plus the system tenant with one admin key, ksys.
func keysSetup(t *testing.T) *testBundle {
	t.Helper()
	b := setup(t)
	b.must(t, &pb.Command{Op: &pb.Command_CreateTenant{CreateTenant: &pb.CreateTenant{Name: SystemTenant}}})
	b.must(t, createKeyCmd("", "ksys", SystemTenant, RoleAdmin))
	return b
}

func TestFSM_RevokeKey(t *testing.T) {
	t.Parallel()
	b := keysSetup(t)
	b.must(t, registerCmd("kw1", "w1"))
	b.must(t, enqueueCmd("kprod", "t1"))

	// Every refusal leaves the state byte-for-byte unchanged.
	for _, c := range []struct {
		name string
		cmd  *pb.Command
		want error
	}{
		{"by a producer key", revokeCmd("kprod", "kw1"), ErrPermissionDenied},
		{"by a worker key", revokeCmd("kw2", "kw1"), ErrPermissionDenied},
		{"by an unknown principal", revokeCmd("nobody", "kw1"), ErrPermissionDenied},
		{"another tenant's key", revokeCmd("kother", "kw1"), ErrKeyNotFound},
		{"an unknown key", revokeCmd("kadmin", "missing"), ErrKeyNotFound},
		{"the system's last admin key", revokeCmd("ksys", "ksys"), ErrLastAdminKey},
		{"the system's last admin key by the node", revokeCmd("", "ksys"), ErrLastAdminKey},
	} {
		t.Run(c.name, func(t *testing.T) { b.mustReject(t, c.cmd, c.want) })
	}

	b.must(t, revokeCmd("kadmin", "kw1"))
	if _, ok := b.f.Key("kw1"); ok {
		t.Fatal("Key(kw1) found after revocation")
	}
	tv, _ := b.f.Tenant("acme")
	if o, ok := tv.WorkerOwner("w1"); ok {
		t.Fatalf("w1 still bound to %q after its key was revoked", o)
	}
	// The revoked key's next command is refused; the revocation is final.
	b.mustReject(t, acquireCmd("kw1", "w1", 1), ErrPermissionDenied)
	b.mustReject(t, revokeCmd("kadmin", "kw1"), ErrKeyNotFound)
	b.mustReject(t, createKeyCmd("", "kw1", "acme", RoleWorker), ErrKeyExists)
	b.mustReject(t, rotateCmd("kadmin", "kprod", "kw1", bytes.Repeat([]byte{1}, 32)), ErrKeyExists)

	// A system admin revokes any tenant's key; an admin may revoke itself
	// (its own tenant), after which it can do nothing.
	b.must(t, revokeCmd("ksys", "kother"))
	b.must(t, revokeCmd("kadmin", "kadmin"))
	b.mustReject(t, revokeCmd("kadmin", "kprod"), ErrPermissionDenied)
	b.mustReject(t, enqueueCmd("kadmin", "t2"), ErrPermissionDenied)
	// With a second system admin, the first may go.
	b.must(t, createKeyCmd("", "ksys2", SystemTenant, RoleAdmin))
	b.must(t, revokeCmd("ksys2", "ksys"))
	b.mustReject(t, revokeCmd("ksys2", "ksys2"), ErrLastAdminKey)

	got := fmt.Sprint(b.f.ListKeys("acme", true))
	want := "[{kadmin acme admin 100 100} {kprod acme producer 100 0} {kw1 acme worker 100 100} {kw2 acme worker 100 0}]"
	if got != want {
		t.Fatalf("ListKeys(acme, revoked) = %s, want %s", got, want)
	}
	if got := len(b.f.ListKeys("", false)); got != 3 {
		t.Fatalf("ListKeys(all, live) has %d keys, want 3 (kprod, kw2, ksys2)", got)
	}
}

func TestFSM_RotateKey(t *testing.T) {
	t.Parallel()
	b := keysSetup(t)
	b.must(t, registerCmd("kw1", "w1"))
	b.must(t, enqueueCmd("kprod", "t1"))
	hash := bytes.Repeat([]byte{9}, 32)
	for _, c := range []struct {
		name string
		cmd  *pb.Command
		want error
	}{
		{"by a producer key", rotateCmd("kprod", "kw1", "kw1b", hash), ErrPermissionDenied},
		{"another tenant's key", rotateCmd("kother", "kw1", "kw1b", hash), ErrKeyNotFound},
		{"to an existing ID", rotateCmd("kadmin", "kw1", "kw2", hash), ErrKeyExists},
		{"to itself", rotateCmd("kadmin", "kw1", "kw1", hash), ErrKeyExists},
		{"to an invalid ID", rotateCmd("kadmin", "kw1", "bad id", hash), ErrInvalidCommand},
		{"with a short hash", rotateCmd("kadmin", "kw1", "kw1b", hash[:31]), ErrInvalidCommand},
		{"an unknown key", rotateCmd("kadmin", "missing", "kw1b", hash), ErrKeyNotFound},
	} {
		t.Run(c.name, func(t *testing.T) { b.mustReject(t, c.cmd, c.want) })
	}

	b.must(t, &pb.Command{NowSecs: 150, Principal: "kadmin", Op: rotateCmd("", "kw1", "kw1b", hash).Op})
	k, ok := b.f.Key("kw1b")
	if !ok || k.Tenant != "acme" || k.Role != RoleWorker || !bytes.Equal(k.Hash, hash) || k.CreatedSecs != 150 {
		t.Fatalf("Key(kw1b) = %+v, %v", k, ok)
	}
	if _, ok := b.f.Key("kw1"); ok {
		t.Fatal("the rotated key is still live")
	}
	tv, _ := b.f.Tenant("acme")
	if o, _ := tv.WorkerOwner("w1"); o != "kw1b" {
		t.Fatalf("w1 bound to %q after rotation, want kw1b", o)
	}
	// The new key acts for the worker at once; the old one is refused.
	b.mustReject(t, acquireCmd("kw1", "w1", 1), ErrPermissionDenied)
	if acq := valueOf[[]Acquired](t, b.must(t, acquireCmd("kw1b", "w1", 1))); len(acq) != 1 {
		t.Fatalf("acquire with the new key = %+v", acq)
	}
	b.mustReject(t, rotateCmd("kadmin", "kw1", "kw1c", hash), ErrKeyNotFound)
	// The system's only admin key may be rotated (it is replaced).
	b.must(t, rotateCmd("ksys", "ksys", "ksysb", hash))
	if k, ok := b.f.Key("ksysb"); !ok || k.Tenant != SystemTenant || k.Role != RoleAdmin {
		t.Fatalf("Key(ksysb) = %+v, %v", k, ok)
	}
	b.mustReject(t, revokeCmd("ksysb", "ksysb"), ErrLastAdminKey)
}

func TestFSM_KeysSnapshotRoundTrip(t *testing.T) {
	t.Parallel()
	b := keysSetup(t)
	b.must(t, registerCmd("kw1", "w1"))
	b.must(t, registerCmd("kw2", "w2"))
	b.must(t, rotateCmd("kadmin", "kw1", "kw1b", bytes.Repeat([]byte{9}, 32)))
	b.must(t, revokeCmd("kadmin", "kw2"))
	st, err := b.f.ExportState()
	if err != nil {
		t.Fatal(err)
	}
	g := New(Options{})
	if err := g.RestoreState(st); err != nil {
		t.Fatal(err)
	}
	st2, _ := g.ExportState()
	if !bytes.Equal(st, st2) {
		t.Fatal("restored state exports differently")
	}
	if got, want := fmt.Sprint(g.ListKeys("", true)), fmt.Sprint(b.f.ListKeys("", true)); got != want {
		t.Fatalf("restored ListKeys = %s, want %s", got, want)
	}
	// The revocations survive: the IDs stay unusable on the restored FSM.
	rb := &testBundle{f: g, now: b.now}
	rb.mustReject(t, createKeyCmd("", "kw2", "acme", RoleWorker), ErrKeyExists)
	rb.mustReject(t, acquireCmd("kw1", "w1", 1), ErrPermissionDenied)
	if o, _ := (TenantView{f: g, t: g.tenants["acme"]}).WorkerOwner("w1"); o != "kw1b" {
		t.Fatalf("restored owner of w1 = %q", o)
	}

	// Key tables that break K1, K2 or K4 do not restore, and change nothing.
	var base pb.FSMState
	if err := proto.Unmarshal(st, &base); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		mutate func(s *pb.FSMState)
	}{
		{"an ID both live and revoked", func(s *pb.FSMState) {
			s.RevokedKeys = append(s.RevokedKeys, &pb.KeyRecord{KeyId: "kprod", Tenant: "acme", Role: RoleProducer})
		}},
		{"a duplicate live ID", func(s *pb.FSMState) { s.Keys = append(s.Keys, s.Keys[0]) }},
		{"a revoked key with a hash", func(s *pb.FSMState) { s.RevokedKeys[0].SecretHash = make([]byte, 32) }},
		{"a live key without a hash", func(s *pb.FSMState) { s.Keys[0].SecretHash = nil }},
		{"an invalid role", func(s *pb.FSMState) { s.Keys[0].Role = "root" }},
		{"a binding to a revoked key", func(s *pb.FSMState) {
			for _, ts := range s.Tenants {
				if ts.GetName() == "acme" {
					ts.WorkerOwners = append(ts.WorkerOwners, &pb.WorkerOwner{WorkerId: "w9", KeyId: "kw2"})
				}
			}
		}},
		{"a binding to a producer key", func(s *pb.FSMState) {
			for _, ts := range s.Tenants {
				if ts.GetName() == "acme" {
					ts.WorkerOwners = append(ts.WorkerOwners, &pb.WorkerOwner{WorkerId: "w9", KeyId: "kprod"})
				}
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := proto.Clone(&base).(*pb.FSMState)
			c.mutate(s)
			bad, err := proto.Marshal(s)
			if err != nil {
				t.Fatal(err)
			}
			if err := g.RestoreState(bad); !errors.Is(err, ErrInvalidState) {
				t.Fatalf("RestoreState = %v, want ErrInvalidState", err)
			}
			if now, _ := g.ExportState(); !bytes.Equal(now, st) {
				t.Fatal("failed restore changed the state")
			}
		})
	}
}

// TestFSM_KeyTableBound fills the table to MaxKeyRecords: creation and
// rotation then fail with KeyLimit and change nothing; revocation, which
// does not grow the table, still works.
func TestFSM_KeyTableBound(t *testing.T) {
	t.Parallel()
	b := keysSetup(t)
	for i := b.f.KeyCount(); i < MaxKeyRecords; i++ {
		b.must(t, createKeyCmd("", fmt.Sprintf("k%05d", i), "acme", RoleProducer))
	}
	b.mustReject(t, createKeyCmd("", "one-more", "acme", RoleProducer), ErrKeyLimit)
	b.mustReject(t, rotateCmd("kadmin", "kprod", "kprod2", bytes.Repeat([]byte{1}, 32)), ErrKeyLimit)
	b.must(t, revokeCmd("kadmin", "kprod"))
	b.mustReject(t, createKeyCmd("", "one-more", "acme", RoleProducer), ErrKeyLimit)
	b.f.mu.RLock()
	defer b.f.mu.RUnlock()
	if err := b.f.fullPublished(); err != nil {
		t.Fatal(err) // published.go P1 over the full table
	}
}
