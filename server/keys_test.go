// Tests of Admin.ListKeys, RevokeKey and RotateKey through a real node.
// Goal: listing shows IDs, tenants, roles and times and never a secret or
// hash, scoped to the caller's tenant unless it is a system admin; a
// revoked or rotated key is refused at once; every refusal changes nothing;
// the system tenant keeps an admin key; every call is audited with the key
// acted on and no secret.
package server

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/internal/apikey"
)

func keyID(t *testing.T, key string) string {
	t.Helper()
	id, _, err := apikey.Parse(key)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestServer_KeysListRevokeRotate(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	b.createTenant(t, "acme", nil, nil)
	sys := b.clients(b.adminKey).admin
	acmeAdminKey, workerKey, prodKey := b.createKey(t, "acme", "admin"), b.createKey(t, "acme", "worker"), b.createKey(t, "acme", "producer")
	acme := b.clients(acmeAdminKey).admin

	// Listing: a tenant admin sees its tenant, a system admin every tenant;
	// no secret (or any part of one) is in the answer.
	lr, err := acme.ListKeys(ctx, connect.NewRequest(&pb.ListKeysRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(lr.Msg.GetKeys()); n != 3 {
		t.Fatalf("acme ListKeys has %d keys, want 3", n)
	}
	all, err := sys.ListKeys(ctx, connect.NewRequest(&pb.ListKeysRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(all.Msg.GetKeys()); n != 4 || all.Msg.GetKeys()[0].GetTenant() != "acme" || all.Msg.GetKeys()[3].GetTenant() != "default" {
		t.Fatalf("system ListKeys = %v", all.Msg.GetKeys())
	}
	js, _ := json.Marshal(all.Msg)
	for _, k := range []string{b.adminKey, acmeAdminKey, workerKey, prodKey} {
		secret := k[len(apikey.Prefix)+17:]
		if strings.Contains(string(js), secret[:12]) {
			t.Fatal("ListKeys leaks a secret")
		}
	}
	if k := all.Msg.GetKeys()[0]; k.GetCreatedSecs() == 0 || k.GetRevokedSecs() != 0 {
		t.Fatalf("key times = %v", k)
	}
	_, err = acme.ListKeys(ctx, connect.NewRequest(&pb.ListKeysRequest{Tenant: "default"}))
	mustCode(t, err, connect.CodePermissionDenied, KindPermissionDenied)
	_, err = b.clients(prodKey).admin.ListKeys(ctx, connect.NewRequest(&pb.ListKeysRequest{}))
	mustCode(t, err, connect.CodePermissionDenied, KindPermissionDenied)

	// Refusals change nothing.
	for _, c := range []struct {
		name string
		call func() error
		code connect.Code
		kind string
	}{
		{"a malformed key ID", func() error {
			_, err := acme.RevokeKey(ctx, connect.NewRequest(&pb.RevokeKeyRequest{KeyId: "nope"}))
			return err
		}, connect.CodeInvalidArgument, KindInvalidArgument},
		{"another tenant's key", func() error {
			_, err := acme.RevokeKey(ctx, connect.NewRequest(&pb.RevokeKeyRequest{KeyId: keyID(t, b.adminKey)}))
			return err
		}, connect.CodeNotFound, "key_not_found"},
		{"rotating another tenant's key", func() error {
			_, err := acme.RotateKey(ctx, connect.NewRequest(&pb.RotateKeyRequest{KeyId: keyID(t, b.adminKey)}))
			return err
		}, connect.CodeNotFound, "key_not_found"},
		{"the system's last admin key", func() error {
			_, err := sys.RevokeKey(ctx, connect.NewRequest(&pb.RevokeKeyRequest{KeyId: keyID(t, b.adminKey)}))
			return err
		}, connect.CodeFailedPrecondition, "last_admin_key"},
		{"by a producer key", func() error {
			_, err := b.clients(prodKey).admin.RevokeKey(ctx, connect.NewRequest(&pb.RevokeKeyRequest{KeyId: keyID(t, workerKey)}))
			return err
		}, connect.CodePermissionDenied, KindPermissionDenied},
	} {
		before := b.state(t)
		mustCode(t, c.call(), c.code, c.kind)
		b.assertUnchanged(t, before, c.name)
	}

	// Revoke: the key is refused at once, everywhere in the API.
	if _, err := b.clients(workerKey).admin.Status(ctx, connect.NewRequest(&pb.StatusRequest{})); err != nil {
		t.Fatal(err)
	}
	if _, err := acme.RevokeKey(ctx, connect.NewRequest(&pb.RevokeKeyRequest{KeyId: keyID(t, workerKey)})); err != nil {
		t.Fatal(err)
	}
	_, err = b.clients(workerKey).admin.Status(ctx, connect.NewRequest(&pb.StatusRequest{}))
	mustCode(t, err, connect.CodeUnauthenticated, KindUnauthenticated)
	_, err = b.clients(workerKey).worker.RegisterWorker(ctx, connect.NewRequest(&pb.RegisterWorkerRequest{WorkerId: "w", Capacity: 1}))
	mustCode(t, err, connect.CodeUnauthenticated, KindUnauthenticated)
	_, err = acme.RevokeKey(ctx, connect.NewRequest(&pb.RevokeKeyRequest{KeyId: keyID(t, workerKey)}))
	mustCode(t, err, connect.CodeNotFound, "key_not_found")
	lr, _ = acme.ListKeys(ctx, connect.NewRequest(&pb.ListKeysRequest{IncludeRevoked: true}))
	revoked := 0
	for _, k := range lr.Msg.GetKeys() {
		if k.GetRevokedSecs() != 0 {
			revoked++
			if k.GetKeyId() != keyID(t, workerKey) {
				t.Fatalf("revoked %s, want %s", k.GetKeyId(), keyID(t, workerKey))
			}
		}
	}
	if revoked != 1 || len(lr.Msg.GetKeys()) != 3 {
		t.Fatalf("ListKeys(include_revoked) = %v", lr.Msg.GetKeys())
	}

	// Rotate: the new key has the old one's tenant and role; the old one is
	// refused.
	rr, err := acme.RotateKey(ctx, connect.NewRequest(&pb.RotateKeyRequest{KeyId: keyID(t, prodKey)}))
	if err != nil {
		t.Fatal(err)
	}
	if rr.Msg.GetRevokedKeyId() != keyID(t, prodKey) || keyID(t, rr.Msg.GetKey()) != rr.Msg.GetKeyId() {
		t.Fatalf("RotateKey = %v", rr.Msg)
	}
	if _, err := b.clients(rr.Msg.GetKey()).producer.Enqueue(ctx, connect.NewRequest(&pb.EnqueueRequest{Tasks: []*pb.NewTask{{TaskId: "t1", ScanId: "s", TargetRef: "x"}}})); err != nil {
		t.Fatalf("Enqueue with the rotated key: %v", err)
	}
	st, err := b.clients(rr.Msg.GetKey()).admin.Status(ctx, connect.NewRequest(&pb.StatusRequest{}))
	if err != nil || st.Msg.GetTenant() != "acme" {
		t.Fatalf("Status with the rotated key = %v, %v", st, err)
	}
	_, err = b.clients(prodKey).producer.GetTask(ctx, connect.NewRequest(&pb.GetTaskRequest{TaskId: "t1"}))
	mustCode(t, err, connect.CodeUnauthenticated, KindUnauthenticated)

	// The system's only admin key may rotate itself.
	sr, err := sys.RotateKey(ctx, connect.NewRequest(&pb.RotateKeyRequest{KeyId: keyID(t, b.adminKey)}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.clients(sr.Msg.GetKey()).admin.ListKeys(ctx, connect.NewRequest(&pb.ListKeysRequest{})); err != nil {
		t.Fatalf("ListKeys with the rotated admin key: %v", err)
	}
	_, err = sys.ListKeys(ctx, connect.NewRequest(&pb.ListKeysRequest{}))
	mustCode(t, err, connect.CodeUnauthenticated, KindUnauthenticated)

	// Audit: one line per mutating call, naming the key acted on, no secret.
	data, err := os.ReadFile(b.auditLog)
	if err != nil {
		t.Fatal(err)
	}
	log := string(data)
	for _, want := range []string{
		`"method":"Admin.RevokeKey","outcome":"ok","revision":0,"subject_key_id":"` + keyID(t, workerKey) + `"`,
		`"method":"Admin.RevokeKey","outcome":"last_admin_key","revision":0,"subject_key_id":"` + keyID(t, b.adminKey) + `"`,
		`"method":"Admin.RotateKey","outcome":"ok","revision":0,"subject_key_id":"` + keyID(t, prodKey) + `"`,
		`"method":"Admin.RotateKey","outcome":"key_not_found"`,
	} {
		if !strings.Contains(log, want) {
			t.Errorf("audit log lacks %s:\n%s", want, log)
		}
	}
	for _, k := range []string{rr.Msg.GetKey(), sr.Msg.GetKey(), prodKey, workerKey} {
		if strings.Contains(log, k) {
			t.Fatal("audit log contains a key")
		}
	}
}
