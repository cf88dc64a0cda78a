// Tests of serve's pre-authentication limit flags and of the warning for
// an API that listens beyond loopback without TLS.
package main

import (
	"bytes"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	distributed "github.com/termivar/distributed"
	"github.com/termivar/distributed/internal/audit"
	"github.com/termivar/distributed/node"
	"github.com/termivar/distributed/server"
)

func TestWarnPlaintext(t *testing.T) {
	t.Parallel()
	cases := []struct {
		addr string
		tls  bool
		warn bool
	}{
		{"0.0.0.0:7420", false, true},
		{"[::]:7420", false, true},
		{"192.0.2.10:7420", false, true},
		{"0.0.0.0:7420", true, false},
		{"127.0.0.1:7420", false, false},
		{"[::1]:7420", false, false},
	}
	for _, tc := range cases {
		ta, err := net.ResolveTCPAddr("tcp", tc.addr)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		warnPlaintext(slog.New(slog.NewTextHandler(&buf, nil)), ta, tc.tls)
		if got := strings.Contains(buf.String(), "level=WARN") && strings.Contains(buf.String(), "without TLS"); got != tc.warn {
			t.Errorf("warnPlaintext(%s, tls=%v) warned = %v, want %v: %q", tc.addr, tc.tls, got, tc.warn, buf.String())
		}
	}
}

func TestServeFlags_Limits(t *testing.T) {
	t.Parallel()
	var f serveFlags
	if err := newServeFlagSet(&f).Parse(nil); err != nil {
		t.Fatal(err)
	}
	if f.serverLimits != server.DefaultLimits() {
		t.Fatalf("defaults = %+v, want %+v", f.serverLimits, server.DefaultLimits())
	}
	f = serveFlags{}
	err := newServeFlagSet(&f).Parse([]string{"--max-conns", "100", "--max-conns-per-source", "10", "--max-preauth-requests", "5",
		"--header-timeout", "2s", "--body-timeout", "3s", "--idle-timeout", "4s", "--auth-failure-burst", "6",
		"--auth-failure-refill", "7s", "--auth-sources", "8", "--auth-audit-window", "9s", "--max-sessions-per-key", "11", "--max-session-messages", "12"})
	if err != nil {
		t.Fatal(err)
	}
	want := server.Limits{MaxConns: 100, MaxConnsPerSource: 10, MaxPreAuthRequests: 5, HeaderTimeout: 2 * time.Second,
		BodyTimeout: 3 * time.Second, IdleTimeout: 4 * time.Second, AuthFailureBurst: 6, AuthFailureRefill: 7 * time.Second,
		AuthSources: 8, AuthAuditWindow: 9 * time.Second, MaxSessionsPerKey: 11, MaxSessionMessages: 12}
	if f.serverLimits != want {
		t.Fatalf("parsed = %+v, want %+v", f.serverLimits, want)
	}
	if code := runServe([]string{"--max-conns", "-1"}); code != exitUsage {
		t.Fatalf("serve --max-conns -1 exit = %d, want %d", code, exitUsage)
	}
}

// TestServeFlags_ServiceTenantDefaults: serve's per-tenant limit flags
// default to the service's limits (every task bound at the core's hard
// ceiling, 65 536 results, 128 MiB of results), which the core accepts,
// and the core's own defaults stay those of contract A.3.
func TestServeFlags_ServiceTenantDefaults(t *testing.T) {
	t.Parallel()
	var f serveFlags
	if err := newServeFlagSet(&f).Parse(nil); err != nil {
		t.Fatal(err)
	}
	if f.limits != serviceLimits() || f.resultLimits != serviceResultLimits() {
		t.Fatalf("serve's tenant defaults = %+v %+v, want the service's", f.limits, f.resultLimits)
	}
	if err := f.limits.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := f.resultLimits.Validate(); err != nil {
		t.Fatal(err)
	}
	l, rl := f.limits, f.resultLimits
	if l.MaxTaskRecords != distributed.MaxTaskRecords || l.MaxActiveTasks != distributed.MaxActiveTasks || l.MaxQueuedTasks != distributed.MaxActiveTasks ||
		l.MaxTerminalTasks != distributed.MaxTaskRecords || rl.MaxResults != distributed.MaxResults || rl.MaxTotalBytes != 128<<20 {
		t.Fatalf("service limits = %+v %+v", l, rl)
	}
	if d := distributed.DefaultLimits(); d.MaxTaskRecords != 4096 || d.MaxQueuedTasks != 1024 {
		t.Fatalf("the core's DefaultLimits changed: %+v", d)
	}
}

// TestServeFlags_AuditRotation: --audit-max-bytes and --audit-keep parse
// into the audit log's rotation (documented defaults 64 MiB and 4), and
// an out-of-range value of them or of --snapshot-growth is a usage error
// before anything is opened.
func TestServeFlags_AuditRotation(t *testing.T) {
	t.Parallel()
	var f serveFlags
	if err := newServeFlagSet(&f).Parse(nil); err != nil {
		t.Fatal(err)
	}
	if want := (audit.Rotation{MaxBytes: 64 << 20, Keep: 4}); f.auditRotation != want {
		t.Fatalf("defaults = %+v, want %+v", f.auditRotation, want)
	}
	if err := newServeFlagSet(&f).Parse([]string{"--audit-max-bytes", "4096", "--audit-keep", "7"}); err != nil {
		t.Fatal(err)
	}
	if want := (audit.Rotation{MaxBytes: 4096, Keep: 7}); f.auditRotation != want {
		t.Fatalf("parsed = %+v, want %+v", f.auditRotation, want)
	}
	dir := t.TempDir()
	for _, args := range [][]string{{"--audit-max-bytes", "-1"}, {"--audit-keep", "0"}, {"--audit-keep", "101"},
		{"--snapshot-growth", "0"}, {"--snapshot-growth", "17"}} {
		if code := runServe(append([]string{"--data-dir", dir}, args...)); code != exitUsage {
			t.Errorf("serve %v exit = %d, want %d", args, code, exitUsage)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("a refused serve wrote %d entries into its data dir", len(entries))
	}
}

// TestServeFlags_SnapshotGrowth: --snapshot-growth (default 1) reaches the
// node's Config.SnapshotGrowth as given, negative (off) included.
func TestServeFlags_SnapshotGrowth(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want int
	}{{nil, node.DefaultSnapshotGrowth}, {[]string{"--snapshot-growth", "16"}, 16}, {[]string{"--snapshot-growth", "-1"}, -1}} {
		var f serveFlags
		if err := newServeFlagSet(&f).Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		if got := nodeConfig(f, slog.New(slog.DiscardHandler), "").SnapshotGrowth; got != tc.want {
			t.Errorf("serve %v: SnapshotGrowth = %d, want %d", tc.args, got, tc.want)
		}
	}
}
