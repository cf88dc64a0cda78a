package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"time"

	"connectrpc.com/connect"

	distributed "github.com/termivar/distributed"

	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/raftfsm"
)

func runKeys(args []string) int {
	if len(args) == 0 || args[0] != "create" {
		fmt.Fprintln(os.Stderr, "usage: termivar-coord keys create --tenant T --role admin|producer|worker")
		return exitUsage
	}
	var c clientFlags
	fs := flag.NewFlagSet("keys create", flag.ContinueOnError)
	c.register(fs)
	tenant := fs.String("tenant", "", "tenant of the new key (default: the caller's)")
	role := fs.String("role", "", "admin, producer or worker")
	if err := fs.Parse(args[1:]); err != nil || *role == "" {
		fmt.Fprintln(os.Stderr, "usage: termivar-coord keys create --tenant T --role admin|producer|worker")
		return exitUsage
	}
	key, err := c.apiKey()
	if err != nil {
		fmt.Fprintln(os.Stderr, "termivar-coord keys create:", err)
		return exitUsage
	}
	cl := newClients(newHTTPClient(c.insecure, 1), c.server, key)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cl.admin.CreateKey(ctx, connect.NewRequest(&pb.CreateKeyRequest{Tenant: *tenant, Role: *role}))
	if err != nil {
		return exitFor("keys create", err)
	}
	fmt.Fprintf(os.Stderr, "created key %s (role %s); it is shown once:\n", res.Msg.GetKeyId(), *role)
	fmt.Println(res.Msg.GetKey())
	return exitOK
}

const tenantsUsage = "usage: termivar-coord tenants create --name N [--max-workers N --max-retries N … (any limit flag of serve)]"

func runTenants(args []string) int {
	if len(args) == 0 || args[0] != "create" {
		fmt.Fprintln(os.Stderr, tenantsUsage)
		return exitUsage
	}
	var c clientFlags
	fs := flag.NewFlagSet("tenants create", flag.ContinueOnError)
	c.register(fs)
	name := fs.String("name", "", "tenant name")
	var lim distributed.Limits
	var rlim distributed.ResultLimits
	addLimitFlags(fs, &lim, &rlim, "the tenant's limit: ")
	if err := fs.Parse(args[1:]); err != nil || *name == "" {
		fmt.Fprintln(os.Stderr, tenantsUsage)
		return exitUsage
	}
	req := &pb.CreateTenantRequest{Name: *name}
	// Without any --max-* flag the node's per-tenant defaults apply; with one,
	// the tenant gets these limits (the core's defaults for the flags not
	// given), checked by the core before anything is created.
	limitSet := false
	fs.Visit(func(f *flag.Flag) { limitSet = limitSet || slices.Contains(limitFlagNames, f.Name) })
	if limitSet {
		if err := lim.Validate(); err != nil {
			fmt.Fprintln(os.Stderr, "termivar-coord tenants create:", err)
			return exitUsage
		}
		if err := rlim.Validate(); err != nil {
			fmt.Fprintln(os.Stderr, "termivar-coord tenants create:", err)
			return exitUsage
		}
		req.Limits, req.ResultLimits = raftfsm.LimitsToProto(lim), raftfsm.ResultLimitsToProto(rlim)
	}
	key, err := c.apiKey()
	if err != nil {
		fmt.Fprintln(os.Stderr, "termivar-coord tenants create:", err)
		return exitUsage
	}
	cl := newClients(newHTTPClient(c.insecure, 1), c.server, key)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cl.admin.CreateTenant(ctx, connect.NewRequest(req)); err != nil {
		return exitFor("tenants create", err)
	}
	fmt.Println("created tenant", *name)
	return exitOK
}
