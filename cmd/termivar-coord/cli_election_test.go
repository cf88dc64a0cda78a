// Tests of the CLI's time-based retry budget (--retry-timeout, env
// TERMIVAR_RETRY_TIMEOUT; client.Config.RetryTimeout). Goal: a CLI call
// that starts while the cluster has no leader rides out the election
// (the old budget of 4 tries ran out in it); with no budget the same call
// fails at once, retryable; bad values are usage errors. Method: a
// 3-member in-process cluster whose leader is killed right before the
// calls; each call is checked to have started while no member led.
package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// noLeader reports whether no live member of c leads.
func (c *tcluster) noLeader() bool {
	for _, n := range c.nodes {
		if !n.stopped && n.rn.n.IsLeader() {
			return false
		}
	}
	return true
}

func TestCluster_CLIRidesOutElection(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	leader := c.leader()
	follower := c.followers(leader)[0]
	leader.kill()
	// NB: the members notice a silent leader only after a heartbeat
	// timeout (250 ms here), so these calls start before any election.
	if !c.noLeader() {
		t.Fatal("a member leads right after the leader was killed")
	}
	code, _, errOut := keysCLI(t, follower.url, c.adminKey, "list", "--retry-timeout", "0")
	if code != exitUnreachable {
		t.Fatalf("keys list --retry-timeout 0 during the election: exit %d (%s), want %d (retryable)", code, errOut, exitUnreachable)
	}
	if !c.noLeader() {
		t.Fatal("the election ended before the calls under test began")
	}
	// Not safe to replay, but refused before the log (no leader): retried.
	start := time.Now()
	code, key, errOut := keysCLI(t, follower.url, c.adminKey, "create", "--role", "producer")
	if code != exitOK {
		t.Fatalf("keys create during the election: exit %d: %s", code, errOut)
	}
	t.Logf("keys create started with no leader took %v", time.Since(start))
	if next := c.leader(); next == leader {
		t.Fatal("the killed member still leads")
	}
	code, list, errOut := keysCLI(t, follower.url, c.adminKey, "list")
	if code != exitOK || !strings.Contains(list, idOf(t, strings.TrimSpace(key))) {
		t.Fatalf("keys list after the election: exit %d: %s\n%s", code, errOut, list)
	}
	// A registered command with the budget given before the command name.
	leader = c.leader()
	leader.kill()
	if !c.noLeader() {
		t.Fatal("a member leads right after the second leader was killed")
	}
	live := c.followers(leader)[0]
	// NB: one member of three cannot elect a leader: the budget runs out
	// and the call fails retryable after about 1 s, not at once.
	code, _, errOut = runCLI(t, live.url, c.adminKey, "--retry-timeout", "1s", "tasks")
	if code != exitUnreachable {
		t.Fatalf("tasks without a quorum: exit %d (%s), want %d", code, errOut, exitUnreachable)
	}
}

func TestCLI_RetryTimeoutFlag(t *testing.T) {
	t.Setenv(envRetryTimeout, "soon")
	if code, _ := dispatchRegistered([]string{"status"}); code != exitUsage {
		t.Fatalf("status with %s=soon: exit %d, want %d", envRetryTimeout, code, exitUsage)
	}
	t.Setenv(envRetryTimeout, "2s")
	var out, errOut bytes.Buffer
	env := &cliEnv{stdin: strings.NewReader(""), stdout: &out, stderr: &errOut}
	if err := env.retry.fromEnv(); err != nil || env.retry.d.Seconds() != 2 {
		t.Fatalf("retry from %s=2s = %v, %v", envRetryTimeout, env.retry, err)
	}
	if _, err := parseGlobal([]string{"--retry-timeout", "-1s", "status"}, env); err == nil {
		t.Fatal("--retry-timeout -1s accepted")
	}
	if code := runKeysTo([]string{"list", "--retry-timeout", "-1s", "--key", "k"}, &out, &errOut); code != exitUsage {
		t.Fatalf("keys list --retry-timeout -1s: exit %d, want %d", code, exitUsage)
	}
}
