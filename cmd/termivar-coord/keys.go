package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	distributed "github.com/termivar/distributed"

	"github.com/termivar/distributed/client"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/internal/apikey"
	"github.com/termivar/distributed/internal/wire"
	"github.com/termivar/distributed/node"
	"github.com/termivar/distributed/raftfsm"
)

const keysUsage = `usage: termivar-coord keys <subcommand> [flags]
  keys create --tenant T --role admin|producer|worker   print a new key (shown once)
  keys list [--tenant T] [--revoked] [--json]           list key IDs, tenants, roles, times
  keys revoke KEYID                                     revoke a key on every node
  keys rotate KEYID [--out FILE]                        replace a key by a new one (same tenant and role)`

func runKeys(args []string) int { return runKeysTo(args, os.Stdout, os.Stderr) }

// runKeysTo runs a keys subcommand writing to stdout and stderr.
func runKeysTo(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		k := &keysCommand{name: "keys " + args[0], stdout: stdout, stderr: stderr}
		k.fs = flag.NewFlagSet(k.name, flag.ContinueOnError)
		k.fs.SetOutput(stderr)
		k.c.register(k.fs)
		// NB: the subcommand bounds its one call (clientFlags.callClient).
		ctx := context.Background()
		switch args[0] {
		case "create":
			return k.create(ctx, args[1:])
		case "list":
			return k.list(ctx, args[1:])
		case "revoke":
			return k.revoke(ctx, args[1:])
		case "rotate":
			return k.rotate(ctx, args[1:])
		}
	}
	fmt.Fprintln(stderr, keysUsage)
	return exitUsage
}

// keysCommand is the shared part of the keys subcommands: flags, key and
// admin client.
type keysCommand struct {
	name           string
	c              clientFlags
	fs             *flag.FlagSet
	stdout, stderr io.Writer
}

// parse parses args and returns the positional arguments; flags may come
// before or after them (parseInterleaved).
func (k *keysCommand) parse(args []string) ([]string, bool) {
	pos, err := parseInterleaved(k.fs, args)
	return pos, err == nil
}

// client returns the client and the context of the subcommand's one call
// (clientFlags.callClient), or prints why not (exit 1).
func (k *keysCommand) client(ctx context.Context) (*client.Client, context.Context, func(), bool) {
	admin, ctx, done, err := k.c.callClient(ctx)
	if err == nil {
		return admin, ctx, done, true
	}
	fmt.Fprintf(k.stderr, "termivar-coord %s: %v\n", k.name, err)
	return nil, nil, nil, false
}

func (k *keysCommand) create(ctx context.Context, args []string) int {
	tenant := k.fs.String("tenant", "", "tenant of the new key (default: the caller's)")
	role := k.fs.String("role", "", "admin, producer or worker")
	if pos, ok := k.parse(args); !ok || len(pos) > 0 || *role == "" {
		fmt.Fprintln(k.stderr, "usage: termivar-coord keys create --tenant T --role admin|producer|worker")
		return exitUsage
	}
	admin, ctx, done, ok := k.client(ctx)
	if !ok {
		return exitUsage
	}
	defer done()
	res, err := admin.CreateKey(ctx, &pb.CreateKeyRequest{Tenant: *tenant, Role: *role})
	if err != nil {
		return exitForTo(k.stderr, k.name, err)
	}
	fmt.Fprintf(k.stderr, "created key %s (role %s); it is shown once:\n", res.GetKeyId(), *role)
	fmt.Fprintln(k.stdout, res.GetKey())
	return exitOK
}

// keyJSON is one line of keys list --json.
type keyJSON struct {
	KeyID       string `json:"key_id"`
	Tenant      string `json:"tenant"`
	Role        string `json:"role"`
	CreatedSecs uint64 `json:"created_secs"`
	RevokedSecs uint64 `json:"revoked_secs,omitempty"`
}

func (k *keysCommand) list(ctx context.Context, args []string) int {
	tenant := k.fs.String("tenant", "", "only this tenant's keys (default: your tenant; every tenant for a system admin)")
	revoked := k.fs.Bool("revoked", false, "also list revoked keys")
	asJSON := k.fs.Bool("json", false, "print one JSON object per key")
	if pos, ok := k.parse(args); !ok || len(pos) > 0 {
		fmt.Fprintln(k.stderr, "usage: termivar-coord keys list [--tenant T] [--revoked] [--json]")
		return exitUsage
	}
	admin, ctx, done, ok := k.client(ctx)
	if !ok {
		return exitUsage
	}
	defer done()
	res, err := admin.ListKeys(ctx, &pb.ListKeysRequest{Tenant: *tenant, IncludeRevoked: *revoked})
	if err != nil {
		return exitForTo(k.stderr, k.name, err)
	}
	if err := printKeys(k.stdout, res.GetKeys(), *asJSON); err != nil {
		fmt.Fprintf(k.stderr, "termivar-coord %s: %v\n", k.name, err)
		return exitUsage
	}
	return exitOK
}

// printKeys writes keys as a table or as JSON lines. Times are the
// cluster's logical seconds (Unix time), shown in UTC.
func printKeys(w io.Writer, keys []*pb.KeyInfo, asJSON bool) error {
	if asJSON {
		for _, k := range keys {
			if err := writeJSON(w, keyJSON{KeyID: k.GetKeyId(), Tenant: k.GetTenant(), Role: k.GetRole(), CreatedSecs: k.GetCreatedSecs(), RevokedSecs: k.GetRevokedSecs()}); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY ID\tTENANT\tROLE\tCREATED\tREVOKED")
	for _, k := range keys {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", k.GetKeyId(), k.GetTenant(), k.GetRole(), secsUTC(k.GetCreatedSecs()), secsUTC(k.GetRevokedSecs()))
	}
	return tw.Flush()
}

// secsUTC renders logical seconds as UTC time, "-" for 0 (unknown or not).
func secsUTC(s uint64) string {
	if s == 0 || s > math.MaxInt64 {
		return "-"
	}
	return time.Unix(int64(s), 0).UTC().Format(time.RFC3339)
}

// keyID parses the one KEYID argument of revoke and rotate (refusing a
// full key, so a secret never travels as an ID); false after printing the
// usage error.
func (k *keysCommand) keyID(args []string, usage string) (string, bool) {
	pos, ok := k.parse(args)
	if !ok || len(pos) != 1 {
		fmt.Fprintln(k.stderr, "usage: termivar-coord "+usage)
		return "", false
	}
	if !apikey.ValidID(pos[0]) {
		fmt.Fprintf(k.stderr, "termivar-coord %s: KEYID is the 16 hex digits after tvk_ (see keys list), not a key\n", k.name)
		return "", false
	}
	return pos[0], true
}

func (k *keysCommand) revoke(ctx context.Context, args []string) int {
	id, ok := k.keyID(args, "keys revoke KEYID")
	if !ok {
		return exitUsage
	}
	admin, ctx, done, ok := k.client(ctx)
	if !ok {
		return exitUsage
	}
	defer done()
	if _, err := admin.RevokeKey(ctx, &pb.RevokeKeyRequest{KeyId: id}); err != nil {
		return exitForTo(k.stderr, k.name, err)
	}
	fmt.Fprintln(k.stdout, "revoked key", id)
	return exitOK
}

func (k *keysCommand) rotate(ctx context.Context, args []string) int {
	out := k.fs.String("out", "", "write the new key to this file (0600, replaced atomically) instead of stdout")
	id, ok := k.keyID(args, "keys rotate KEYID [--out FILE]")
	if !ok {
		return exitUsage
	}
	admin, ctx, done, ok := k.client(ctx)
	if !ok {
		return exitUsage
	}
	defer done()
	res, err := admin.RotateKey(ctx, &pb.RotateKeyRequest{KeyId: id})
	if err != nil {
		return exitForTo(k.stderr, k.name, err)
	}
	if *out != "" {
		if err := node.WriteFileAtomic(*out, []byte(res.GetKey()+"\n"), 0o600); err != nil {
			// NB: the old key is already revoked; print the new one rather
			// than lose it.
			fmt.Fprintf(k.stderr, "termivar-coord %s: write %s: %v; the new key is:\n", k.name, *out, err)
			fmt.Fprintln(k.stdout, res.GetKey())
			return exitRejected
		}
		fmt.Fprintf(k.stderr, "revoked key %s; new key %s written to %s\n", id, res.GetKeyId(), *out)
		return exitOK
	}
	fmt.Fprintf(k.stderr, "revoked key %s; new key %s (same tenant and role) is shown once:\n", id, res.GetKeyId())
	fmt.Fprintln(k.stdout, res.GetKey())
	return exitOK
}

const tenantsUsage = `usage: termivar-coord tenants create --name N [--result-retention D] [--max-workers N --max-retries N … (any limit flag of serve)]
       termivar-coord tenants update --name N --result-retention D

  --result-retention D  purge terminal tasks and their results D after they
                        finished (e.g. 7d, 12h, 30m; 0 keeps them)`

func runTenants(args []string) int {
	if len(args) > 0 && args[0] == "update" {
		return runTenantsUpdate(args[1:])
	}
	if len(args) == 0 || args[0] != "create" {
		fmt.Fprintln(os.Stderr, tenantsUsage)
		return exitUsage
	}
	var c clientFlags
	fs := flag.NewFlagSet("tenants create", flag.ContinueOnError)
	c.register(fs)
	name := fs.String("name", "", "tenant name")
	retention := fs.String("result-retention", "0", "purge terminal tasks and their results this long after they finished (7d, 12h; 0 keeps them)")
	var lim distributed.Limits
	var rlim distributed.ResultLimits
	addLimitFlags(fs, &lim, &rlim, "the tenant's limit: ")
	if err := fs.Parse(args[1:]); err != nil || *name == "" {
		fmt.Fprintln(os.Stderr, tenantsUsage)
		return exitUsage
	}
	retSecs, err := parseRetention(*retention)
	if err != nil {
		fmt.Fprintln(os.Stderr, "termivar-coord tenants create:", err)
		return exitUsage
	}
	req := &pb.CreateTenantRequest{Name: *name, ResultRetentionSecs: retSecs}
	// Without any --max-* flag the node's per-tenant defaults apply; with one,
	// the tenant gets these limits (the service's defaults,
	// service_limits.go, for the flags not given), checked by the core
	// before anything is created.
	if slices.ContainsFunc(limitFlagNames, func(name string) bool { return flagSet(fs, name) }) {
		err = cmp.Or(lim.Validate(), rlim.Validate())
		req.Limits, req.ResultLimits = wire.LimitsToProto(lim), wire.ResultLimitsToProto(rlim)
	}
	var (
		admin *client.Client
		ctx   context.Context
		done  func()
	)
	if err == nil {
		admin, ctx, done, err = c.callClient(context.Background())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "termivar-coord tenants create:", err)
		return exitUsage
	}
	defer done()
	if _, err := admin.CreateTenant(ctx, req); err != nil {
		return exitFor("tenants create", err)
	}
	fmt.Println("created tenant", *name)
	return exitOK
}

// runTenantsUpdate sets a tenant's result retention (UpdateTenant).
func runTenantsUpdate(args []string) int {
	var c clientFlags
	fs := flag.NewFlagSet("tenants update", flag.ContinueOnError)
	c.register(fs)
	name := fs.String("name", "", "tenant name")
	retention := fs.String("result-retention", "", "purge terminal tasks and their results this long after they finished (7d, 12h; 0 keeps them)")
	if err := fs.Parse(args); err != nil || *name == "" || *retention == "" || fs.NArg() > 0 {
		fmt.Fprintln(os.Stderr, tenantsUsage)
		return exitUsage
	}
	secs, err := parseRetention(*retention)
	if err != nil {
		fmt.Fprintln(os.Stderr, "termivar-coord tenants update:", err)
		return exitUsage
	}
	admin, ctx, done, err := c.callClient(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, "termivar-coord tenants update:", err)
		return exitUsage
	}
	defer done()
	req := &pb.UpdateTenantRequest{Name: *name, ResultRetentionSecs: secs}
	if _, err := admin.UpdateTenant(ctx, req); err != nil {
		return exitFor("tenants update", err)
	}
	fmt.Printf("tenant %s: result retention %s\n", *name, retentionString(secs))
	return exitOK
}

// parseRetention reads a retention: a Go duration (12h, 90m) or whole days
// (7d); 0 is off. It must be whole seconds and at most
// raftfsm.MaxResultRetentionSecs.
func parseRetention(s string) (uint64, error) {
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseUint(days, 10, 32)
		if err != nil {
			return 0, fmt.Errorf("--result-retention %q: want a duration such as 7d, 12h or 0", s)
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil || d < 0 {
			return 0, fmt.Errorf("--result-retention %q: want a duration such as 7d, 12h or 0", s)
		}
	}
	if d%time.Second != 0 || uint64(d/time.Second) > raftfsm.MaxResultRetentionSecs {
		return 0, fmt.Errorf("--result-retention %q: want whole seconds, at most 3650d", s)
	}
	return uint64(d / time.Second), nil
}

// retentionString renders seconds as parseRetention reads them.
func retentionString(secs uint64) string {
	switch {
	case secs == 0:
		return "off"
	case secs%86400 == 0:
		return strconv.FormatUint(secs/86400, 10) + "d"
	}
	return (time.Duration(secs) * time.Second).String()
}
