package main

import (
	"context"
	"errors"
	"testing"

	distributed "github.com/termivar/distributed"
	"github.com/termivar/distributed/client"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/node"
)

// TestCLI_TenantsCreateWithLimits: `tenants create` gives a tenant its own
// limits (here two workers at most) and rejects invalid limits before
// creating anything; without limit flags the node's defaults apply.
func TestCLI_TenantsCreateWithLimits(t *testing.T) {
	t.Parallel()
	url, key := inProcessNode(t, node.Config{})
	create := func(args ...string) int {
		return runTenants(append([]string{"create", "--server", url, "--key", key}, args...))
	}
	if code := create("--name", "bad", "--max-active-tasks", "16384", "--max-queued-tasks", "16385"); code != exitUsage {
		t.Fatalf("invalid limits: exit %d, want %d", code, exitUsage)
	}
	if code := create("--name", "small", "--max-workers", "2"); code != exitOK {
		t.Fatalf("tenants create: exit %d", code)
	}
	if code := create("--name", "plain"); code != exitOK {
		t.Fatalf("tenants create without limits: exit %d", code)
	}
	admin, err := client.New(client.Config{ServerURL: url, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ctx := context.Background()
	if _, err := admin.CreateKey(ctx, &pb.CreateKeyRequest{Tenant: "bad", Role: "worker"}); err == nil {
		t.Fatal("the tenant with invalid limits exists")
	}
	for tenant, want := range map[string]int{"small": 2, "plain": distributed.DefaultLimits().MaxWorkers} {
		kr, err := admin.CreateKey(ctx, &pb.CreateKeyRequest{Tenant: tenant, Role: "worker"})
		if err != nil {
			t.Fatal(err)
		}
		w, err := client.New(client.Config{ServerURL: url, Key: kr.GetKey()})
		if err != nil {
			t.Fatal(err)
		}
		n := want
		if n > 3 {
			n = 3 // the default (256) is not exhausted; three registrations suffice
		}
		for i := 0; i < n; i++ {
			if _, err := w.RegisterWorker(ctx, &pb.RegisterWorkerRequest{WorkerId: "w" + string(rune('a'+i)), Capacity: 1}); err != nil {
				t.Fatalf("%s: register %d: %v", tenant, i, err)
			}
		}
		_, err = w.RegisterWorker(ctx, &pb.RegisterWorkerRequest{WorkerId: "extra", Capacity: 1})
		if full := errors.Is(err, distributed.ErrWorkerCapacityReached); full != (want == n) {
			t.Fatalf("%s: register beyond %d workers: %v", tenant, n, err)
		}
		w.Close()
	}
}
