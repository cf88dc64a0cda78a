// Network namespaces for the partition tests (netns_test.go): a hub
// namespace holds a bridge; each member gets its own namespace on a veth
// pair into the bridge, and the test's own namespace joins the bridge too,
// so the test's clients reach every member whatever the partition.
// Partitions are blackhole routes inside the members' namespaces, one per
// direction of a cut pair: new connections fail at once, and packets of
// established connections are dropped silently until they time out.
package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// netLab is one test's namespaces and links; names are unique per lab.
type netLab struct {
	t      *testing.T
	prefix string // unique name prefix of namespaces and links
	subnet string // "10.231.Y.": members are .1…, the test's end .254
	hub    string
	ns     []string
	cut    map[[2]int]bool // pairs (a < b) cut by blackhole routes
}

// requireNetns skips the test (with the reason) unless it runs as root and
// `ip netns` works; with TERMIVAR_REQUIRE_NETNS=1 (set by .ci/run) the
// skip is a failure instead.
func requireNetns(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary and runs processes in network namespaces")
	}
	if why := netnsUnavailable(); why != "" {
		requireOrSkip(t, "TERMIVAR_REQUIRE_NETNS", "", "partition tests need root and `ip netns` ("+why+"); CI runs them")
	}
}

// netnsUnavailable says why the partition tests cannot run here ("" if
// they can): not root, no ip command, or `ip netns add` failing.
func netnsUnavailable() string {
	if os.Geteuid() != 0 {
		return "not running as root"
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return "no `ip` command (Debian package iproute2)"
	}
	probe := "tvprobe-" + randHex(4)
	if out, err := exec.Command("ip", "netns", "add", probe).CombinedOutput(); err != nil {
		return fmt.Sprintf("ip netns add: %v: %s", err, strings.TrimSpace(string(out)))
	}
	if out, err := exec.Command("ip", "netns", "del", probe).CombinedOutput(); err != nil {
		return fmt.Sprintf("ip netns del: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return ""
}

func randHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// newNetLab creates n member namespaces on one bridge; t.Cleanup removes
// everything, also after a failure half-way.
func newNetLab(t *testing.T, n int) *netLab {
	t.Helper()
	l := &netLab{t: t, prefix: "tv" + randHex(3), cut: map[[2]int]bool{}}
	l.hub = l.prefix + "-hub"
	l.subnet = l.freeSubnet()
	t.Cleanup(l.destroy)
	l.must("netns", "add", l.hub)
	l.must("-n", l.hub, "link", "set", "lo", "up")
	l.must("-n", l.hub, "link", "add", "br0", "type", "bridge")
	l.must("-n", l.hub, "link", "set", "br0", "up")
	host := l.prefix + "-h"
	l.must("link", "add", host, "type", "veth", "peer", "name", "up0", "netns", l.hub)
	l.must("-n", l.hub, "link", "set", "up0", "master", "br0", "up")
	l.must("addr", "add", l.subnet+"254/24", "dev", host)
	l.must("link", "set", host, "up")
	for i := range n {
		ns := fmt.Sprintf("%s-%d", l.prefix, i+1)
		l.must("netns", "add", ns)
		l.ns = append(l.ns, ns)
		port := fmt.Sprintf("m%d", i+1)
		l.must("-n", l.hub, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
		l.must("-n", l.hub, "link", "set", port, "master", "br0", "up")
		l.must("-n", ns, "link", "set", "lo", "up")
		l.must("-n", ns, "addr", "add", l.addr(i)+"/24", "dev", "eth0")
		l.must("-n", ns, "link", "set", "eth0", "up")
	}
	return l
}

// freeSubnet picks a 10.231.Y.0/24 that no route of the test's namespace
// mentions.
func (l *netLab) freeSubnet() string {
	out, err := exec.Command("ip", "-4", "route", "show").CombinedOutput()
	if err != nil {
		l.t.Fatalf("ip route show: %v: %s", err, out)
	}
	for range 64 {
		b := make([]byte, 1)
		_, _ = rand.Read(b)
		s := fmt.Sprintf("10.231.%d.", b[0])
		if !strings.Contains(string(out), s) {
			return s
		}
	}
	l.t.Fatal("no free 10.231.Y.0/24 subnet")
	return ""
}

// addr is member i's address.
func (l *netLab) addr(i int) string { return fmt.Sprintf("%s%d", l.subnet, i+1) }

func (l *netLab) run(args ...string) error {
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func (l *netLab) must(args ...string) {
	l.t.Helper()
	if err := l.run(args...); err != nil {
		l.t.Fatal(err)
	}
}

// destroy removes the namespaces (their veth ends, and so the pairs, go
// with them) and the test's end of the hub link.
func (l *netLab) destroy() {
	for _, ns := range append(l.ns, l.hub) {
		if err := l.run("netns", "del", ns); err != nil {
			l.t.Logf("cleanup: %v", err)
		}
	}
	// NB: deleting the hub deleted this link's peer and so the link.
	_ = l.run("link", "del", l.prefix+"-h")
}

// setCut cuts (or heals) both directions between members a and b.
func (l *netLab) setCut(a, b int, cut bool) {
	l.t.Helper()
	if a > b {
		a, b = b, a
	}
	if a == b || l.cut[[2]int{a, b}] == cut {
		return
	}
	verb := "add"
	if !cut {
		verb = "del"
	}
	l.must("-n", l.ns[a], "route", verb, "blackhole", l.addr(b)+"/32")
	l.must("-n", l.ns[b], "route", verb, "blackhole", l.addr(a)+"/32")
	l.cut[[2]int{a, b}] = cut
}

// isolate cuts member i from every other member.
func (l *netLab) isolate(i int) {
	l.t.Helper()
	for j := range l.ns {
		l.setCut(i, j, true)
	}
}

// healAll removes every cut.
func (l *netLab) healAll() {
	l.t.Helper()
	for p, c := range l.cut {
		if c {
			l.setCut(p[0], p[1], false)
		}
	}
}

// reachable reports whether member a's namespace can open a TCP
// connection to b's raft port right now (a check of the lab itself).
func (l *netLab) reachable(a, b, port int) bool {
	err := exec.Command("ip", "netns", "exec", l.ns[a], "timeout", "3", "bash", "-c",
		fmt.Sprintf("exec 3<>/dev/tcp/%s/%d", l.addr(b), port)).Run()
	return err == nil
}
