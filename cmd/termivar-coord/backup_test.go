// Tests of backup and restore. Goal: a backup taken through a follower
// while producers and a worker run holds every write acknowledged before
// it began, and a node restored from it serves exactly that state — every
// tenant's core ExportState byte for byte, the keys, and the whole FSM
// state up to what a new cluster must change (epoch, node table) — under a
// new epoch, so that a token of the old cluster is refused while its API
// keys work; a damaged, truncated or foreign file is refused with exit 2
// and leaves no data dir behind; a target in use is left untouched.
// Method: a 3-node in-process cluster (cluster_test.go) with opsLoad, the
// CLI's runBackupTo / runRestoreTo, and an in-process serve on the result.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	distributed "github.com/termivar/distributed"
	"github.com/termivar/distributed/client"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/internal/apikey"
	"github.com/termivar/distributed/internal/backup"
	"github.com/termivar/distributed/internal/wireerr"
	"github.com/termivar/distributed/node"
	"github.com/termivar/distributed/raftfsm"
)

// readBackup decodes a backup file and restores its state into an FSM.
func readBackup(t *testing.T, path string) (*pb.BackupHeader, []byte, *raftfsm.FSM) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	h, state, err := backup.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	f := raftfsm.New(raftfsm.Options{})
	if err := f.RestoreState(state); err != nil {
		t.Fatal(err)
	}
	return h, state, f
}

func TestBackup_RestoreUnderLoad(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	admin := c.client(c.urls(0), c.adminKey)
	if _, err := admin.CreateTenant(ctx, &pb.CreateTenantRequest{Name: "acme"}); err != nil {
		t.Fatal(err)
	}
	prodKey, workKey := c.createKey(admin, "producer"), c.createKey(admin, "worker")
	acmeKey, err := admin.CreateKey(ctx, &pb.CreateKeyRequest{Tenant: "acme", Role: "producer"})
	if err != nil {
		t.Fatal(err)
	}
	// A lease held across the backup: its token must not work on the
	// restored cluster.
	holder := c.client(c.urls(0), workKey)
	if _, err := c.client(c.urls(0), prodKey).Enqueue(ctx, &pb.EnqueueRequest{Tasks: []*pb.NewTask{{TaskId: "held", ScanId: "h", TargetRef: "x"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.RegisterWorker(ctx, &pb.RegisterWorkerRequest{WorkerId: "holder", Capacity: 1}); err != nil {
		t.Fatal(err)
	}
	held, err := holder.Acquire(ctx, &pb.AcquireRequest{WorkerId: "holder", MaxTasks: 1, Start: true, LeaseTtlSecs: 600})
	if err != nil || len(held.GetTasks()) != 1 || held.GetTasks()[0].GetTaskId() != "held" {
		t.Fatalf("Acquire held = %v, %v", held, err)
	}
	heldToken := held.GetTasks()[0].GetLeaseToken()

	l := c.leader()
	var follower *tnode
	for _, n := range c.nodes {
		if n != l {
			follower = n
		}
	}
	load := startOpsLoad(t, c, "s", prodKey, workKey, []string{c.urls(0), c.urls(1)}, c.urls(2))
	acme := startOpsLoad(t, c, "a", acmeKey.GetKey(), workKey, []string{c.urls(1)}, c.urls(1))
	defer acme.stop()
	defer load.stop()
	waitCond(t, "load before the backup", func() bool { e, d := load.counts(); ea, _ := acme.counts(); return e >= 200 && d >= 50 && ea >= 40 })

	// NB: a restored one-voter cluster raises its version to its binary's
	// at once, and the raise to 3 gives the system tenant the node's
	// scheduling options; a backup taken before this cluster's member loop
	// raised it would differ from the restored tenant by that one command.
	waitCond(t, "cluster version raised on every member", func() bool {
		return !slices.ContainsFunc(c.nodes, func(n *tnode) bool { return n.rn.n.FSM().ClusterVersion() < raftfsm.SupportedVersion })
	})
	enqBefore, doneBefore := load.acked()
	acmeBefore, _ := acme.acked()
	backupDir := t.TempDir()
	file := filepath.Join(backupDir, "cluster.backup")
	var out, errOut bytes.Buffer
	// Refusals first: a producer key, and an existing file; neither leaves
	// a file behind.
	if code := runBackupTo([]string{"--server", follower.url, "--key", prodKey, "--out", file}, &out, &errOut); code != exitRejected || !strings.Contains(errOut.String(), "permission_denied") {
		t.Fatalf("backup with a producer key = %d, %q; want 2, permission_denied", code, errOut.String())
	}
	if ents, _ := os.ReadDir(backupDir); len(ents) != 0 {
		t.Fatalf("a refused backup left %v", ents)
	}
	if code := runBackupTo([]string{"--server", follower.url, "--key", c.adminKey, "--out", file}, &out, &errOut); code != exitOK {
		t.Fatalf("backup = %d: %s", code, errOut.String())
	}
	t.Logf("%s", strings.TrimSpace(out.String()))
	load.waitProgress(t, "load after the backup", 40, 10)
	load.stop()
	acme.stop()
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("backup file: %v, %v; want mode 0600", fi, err)
	}

	h, state, bf := readBackup(t, file)
	// NB: the leader of the moment took it; under load leadership may
	// have moved since l was read.
	if !bytes.Equal(h.GetEpochId(), l.rn.n.FSM().Epoch()) || !slices.ContainsFunc(c.nodes, func(n *tnode) bool { return n.id == h.GetNodeId() }) {
		t.Errorf("backup header: epoch %x by %q; want the cluster's epoch, taken by a member", h.GetEpochId(), h.GetNodeId())
	}
	checkAcked(t, bf, "default", enqBefore, doneBefore)
	checkAcked(t, bf, "acme", acmeBefore, nil)

	// Restore into a new data dir and serve it.
	dir := filepath.Join(t.TempDir(), "restored")
	apiLn, raftLn := listen(t), listen(t)
	out.Reset()
	errOut.Reset()
	keyFile := filepath.Join(c.nodes[0].dir, node.AdminKeyFile)
	if code := runRestoreTo([]string{"--from", file, "--data-dir", dir, "--node-id", "r1", "--raft-addr", raftLn.Addr().String(), "--admin-key-file", keyFile}, &out, &errOut); code != exitOK {
		t.Fatalf("restore = %d: %s", code, errOut.String())
	}
	if k, err := client.LoadKey(filepath.Join(dir, node.AdminKeyFile)); err != nil || k != c.adminKey {
		t.Fatalf("restored admin.key: %v; want the cluster's admin key", err)
	}
	t.Logf("%s", strings.TrimSpace(out.String()))
	f := nodeFlags(t, dir, "r1", apiLn, raftLn)
	f.tick = 0 // NB: no recovery ticker: the tenants must stay as restored
	r := &tnode{id: "r1", dir: dir}
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	defer scancel()
	if err := r.start(sctx, f); err != nil {
		t.Fatalf("serve the restored data dir: %v", err)
	}
	defer r.kill()
	compareRestored(t, state, r.rn.n.FSM())

	// Keys survive; tokens of the old cluster do not.
	rc := c.client(r.url, c.adminKey)
	if _, err := rc.Status(ctx, &pb.StatusRequest{}); err != nil {
		t.Fatalf("the old admin key on the restored node: %v", err)
	}
	rw := c.client(r.url, workKey)
	_, err = rw.Complete(ctx, &pb.CompleteRequest{LeaseToken: heldToken, Result: []byte("late")})
	if codeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("Complete with a lease token of the old cluster = %v, want PermissionDenied", err)
	}
	if d, ok := wireerr.DetailOf(err); !ok || d.GetKind() != "invalid_token" {
		t.Errorf("old token refusal kind = %v, want invalid_token", d)
	}
	if _, err := holder.Complete(ctx, &pb.CompleteRequest{LeaseToken: heldToken, Result: []byte("r")}); err != nil {
		t.Errorf("the same token on the old cluster: %v (the control)", err)
	}
	task, ok, _ := mustTenant(t, r.rn.n.FSM(), "default").GetTask("held")
	if !ok || task.Status() != distributed.TaskRunning {
		t.Errorf("held task on the restored node: %v, %v; want running (it recovers when its lease expires)", task.Status(), ok)
	}
}

func mustTenant(t *testing.T, f *raftfsm.FSM, name string) raftfsm.TenantView {
	t.Helper()
	tv, ok := f.Tenant(name)
	if !ok {
		t.Fatalf("tenant %s missing", name)
	}
	return tv
}

// checkAcked fails unless every acknowledged enqueue exists in tenant and
// every acknowledged completion is completed there.
func checkAcked(t *testing.T, f *raftfsm.FSM, tenant string, enq map[string]bool, done map[string]string) {
	t.Helper()
	tv := mustTenant(t, f, tenant)
	for id := range enq {
		if _, ok, err := tv.GetTask(id); !ok || err != nil {
			t.Errorf("%s: enqueue of %s acknowledged before the backup began, missing from it", tenant, id)
		}
	}
	for id := range done {
		if task, ok, _ := tv.GetTask(id); !ok || task.Status() != distributed.TaskCompleted {
			t.Errorf("%s: completion of %s acknowledged before the backup began, not completed in it", tenant, id)
		}
	}
	t.Logf("%s: %d enqueues and %d completions acknowledged before the backup, all in it", tenant, len(enq), len(done))
}

// compareRestored checks the restored FSM against the backed-up state:
// every tenant (core pool and result ExportState, owners, scans), the keys
// and the revoked keys byte for byte; then the whole state's SHA-256 once
// the fields a new cluster changes are set back (epoch, node table, the
// logical time its own registration advanced, the cluster version it
// raised).
func compareRestored(t *testing.T, backedUp []byte, f *raftfsm.FSM) {
	t.Helper()
	live, err := f.ExportState()
	if err != nil {
		t.Fatal(err)
	}
	var want, got pb.FSMState
	if err := proto.Unmarshal(backedUp, &want); err != nil {
		t.Fatal(err)
	}
	if err := proto.Unmarshal(live, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.GetTenants()) != len(want.GetTenants()) {
		t.Fatalf("restored %d tenants, backup has %d", len(got.GetTenants()), len(want.GetTenants()))
	}
	for i, w := range want.GetTenants() {
		g := got.GetTenants()[i]
		tv := mustTenant(t, f, w.GetName())
		if !bytes.Equal(g.GetPoolState(), w.GetPoolState()) || !bytes.Equal(g.GetResultState(), w.GetResultState()) || !proto.Equal(g, w) {
			t.Errorf("tenant %s differs from the backup in %v", w.GetName(), differingFields(g, w))
		}
		t.Logf("tenant %s: %d tasks, pool state %d bytes, result state %d bytes: equal", w.GetName(), len(tv.TaskIDs()), len(w.GetPoolState()), len(w.GetResultState()))
	}
	if !equalKeys(got.GetKeys(), want.GetKeys()) || !equalKeys(got.GetRevokedKeys(), want.GetRevokedKeys()) {
		t.Error("keys differ from the backup")
	}
	if bytes.Equal(got.GetEpochId(), want.GetEpochId()) {
		t.Error("the restored cluster kept the old epoch")
	}
	if got.GetLastTime() < want.GetLastTime() {
		t.Errorf("logical time went back: %d < %d", got.GetLastTime(), want.GetLastTime())
	}
	if got.GetClusterVersion() < want.GetClusterVersion() {
		t.Errorf("cluster version went back: %d < %d", got.GetClusterVersion(), want.GetClusterVersion())
	}
	// NB: a one-voter cluster raises its version to its binary's at once
	// (node/version.go); a backup taken before its cluster did holds 1.
	got.EpochId, got.Nodes, got.LastTime, got.ClusterVersion = want.GetEpochId(), want.GetNodes(), want.GetLastTime(), want.GetClusterVersion()
	norm, err := proto.MarshalOptions{Deterministic: true}.Marshal(&got)
	if err != nil {
		t.Fatal(err)
	}
	if gs, ws := sha256.Sum256(norm), sha256.Sum256(backedUp); gs != ws {
		t.Errorf("state hash of the restored node (epoch, nodes and time set back) %x, of the backup %x", gs[:8], ws[:8])
	}
}

func equalKeys(a, b []*pb.KeyRecord) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !proto.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

// smallBackup returns a valid backup file of a small FSM: epoch, the
// system tenant, an admin key and a few tasks.
func smallBackup(t *testing.T) []byte {
	t.Helper()
	f := raftfsm.New(raftfsm.Options{})
	epoch, secret := make([]byte, raftfsm.EpochBytes), make([]byte, 32)
	if _, err := rand.Read(epoch); err != nil {
		t.Fatal(err)
	}
	if _, err := rand.Read(secret); err != nil {
		t.Fatal(err)
	}
	hash := sha256.Sum256(secret)
	for _, cmd := range []*pb.Command{
		{Op: &pb.Command_InitCluster{InitCluster: &pb.InitCluster{EpochId: epoch}}},
		{Op: &pb.Command_CreateTenant{CreateTenant: &pb.CreateTenant{Name: raftfsm.SystemTenant}}},
		{Op: &pb.Command_CreateKey{CreateKey: &pb.CreateKey{KeyId: hex.EncodeToString(secret[:8]), SecretHash: hash[:], KeyTenant: raftfsm.SystemTenant, Role: raftfsm.RoleAdmin}}},
		{Tenant: raftfsm.SystemTenant, Op: &pb.Command_Enqueue{Enqueue: &pb.EnqueueTasks{Tasks: []*pb.TaskSpec{{TaskId: "t1", ScanId: "s", TargetRef: []byte("x")}, {TaskId: "t2", ScanId: "s", TargetRef: []byte("y")}}}}},
	} {
		cmd.Version, cmd.NowSecs = raftfsm.CommandVersion, 100
		if r := f.ApplyCommand(cmd).(raftfsm.Response); r.Err != nil {
			t.Fatalf("%v: %v", cmd, r.Err)
		}
	}
	st, err := f.ExportState()
	if err != nil {
		t.Fatal(err)
	}
	b, err := backup.Encode(&pb.BackupHeader{EpochId: epoch, AppliedIndex: 4, StateVersion: raftfsm.StateVersion, NodeId: "n1"}, st)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRestore_RefusesDamagedBackup(t *testing.T) {
	t.Parallel()
	good := smallBackup(t)
	flipped := bytes.Clone(good)
	flipped[len(flipped)/2] ^= 1
	notABackup := bytes.Clone(good)
	copy(notABackup, "NOTABACK")
	for name, b := range map[string][]byte{
		"empty": {}, "header only": good[:20], "half": good[:len(good)/2], "last byte missing": good[:len(good)-1],
		"flipped byte": flipped, "not a backup": notABackup,
	} {
		t.Run(name, func(t *testing.T) {
			parent := t.TempDir()
			file := filepath.Join(parent, "in.backup")
			if err := os.WriteFile(file, b, 0o600); err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(parent, "data")
			var out, errOut bytes.Buffer
			code := runRestoreTo([]string{"--from", file, "--data-dir", dir}, &out, &errOut)
			if code != exitRejected || !strings.Contains(errOut.String(), "damaged") {
				t.Fatalf("restore of a %s backup = %d, %q; want 2 and a message saying it is damaged", name, code, errOut.String())
			}
			ents, _ := os.ReadDir(parent)
			if len(ents) != 1 {
				t.Errorf("after the refusal the parent holds %v, want only the backup file (no data dir, no temporary)", ents)
			}
		})
	}
	t.Run("control", func(t *testing.T) {
		parent := t.TempDir()
		file := filepath.Join(parent, "in.backup")
		if err := os.WriteFile(file, good, 0o600); err != nil {
			t.Fatal(err)
		}
		var out, errOut bytes.Buffer
		if code := runRestoreTo([]string{"--from", file, "--data-dir", filepath.Join(parent, "data")}, &out, &errOut); code != exitOK {
			t.Fatalf("restore of the intact backup = %d: %s", code, errOut.String())
		}
		for _, p := range []string{"identity.json", "cluster.secret", "raft/snapshots"} {
			if _, err := os.Stat(filepath.Join(parent, "data", p)); err != nil {
				t.Errorf("restored data dir lacks %s: %v", p, err)
			}
		}
	})
}

func TestRestore_RefusesUsedDataDir(t *testing.T) {
	t.Parallel()
	parent := t.TempDir()
	file := filepath.Join(parent, "in.backup")
	if err := os.WriteFile(file, smallBackup(t), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(parent, "data")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	keep := filepath.Join(dir, "keep")
	if err := os.WriteFile(keep, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := runRestoreTo([]string{"--from", file, "--data-dir", dir}, &out, &errOut); code != exitRejected || !strings.Contains(errOut.String(), "not empty") {
		t.Fatalf("restore into a used data dir = %d, %q; want 2, not empty", code, errOut.String())
	}
	ents, _ := os.ReadDir(dir)
	b, _ := os.ReadFile(keep)
	if len(ents) != 1 || string(b) != "old" {
		t.Errorf("the used data dir changed: %v, %q", ents, b)
	}
	if ents, _ := os.ReadDir(parent); len(ents) != 2 {
		t.Errorf("parent holds %v, want the backup and the data dir only", ents)
	}
	// An admin key that is not in the backup: refused, nothing written.
	stranger, err := apikey.Generate(nil)
	if err != nil {
		t.Fatal(err)
	}
	strangerFile := filepath.Join(parent, "stranger.key")
	if err := os.WriteFile(strangerFile, []byte(stranger.Key), 0o600); err != nil {
		t.Fatal(err)
	}
	fresh := filepath.Join(parent, "fresh")
	if code := runRestoreTo([]string{"--from", file, "--data-dir", fresh, "--admin-key-file", strangerFile}, &out, &errOut); code != exitRejected || !strings.Contains(errOut.String(), "not a live admin key") {
		t.Fatalf("restore with a foreign admin key = %d, %q; want 2", code, errOut.String())
	}
	if _, err := os.Stat(fresh); err == nil {
		t.Error("a refused restore left its data dir")
	}
	for _, args := range [][]string{{"--from", file}, {"--data-dir", dir}, {"--from", file, "--data-dir", dir, "extra"}} {
		if code := runRestoreTo(args, &out, &errOut); code != exitUsage {
			t.Errorf("restore %q = %d, want 1", args, code)
		}
	}
}

// differingFields names the top-level fields of a and b (same message
// type) whose values differ.
func differingFields(a, b proto.Message) []string {
	var out []string
	ra, rb := a.ProtoReflect(), b.ProtoReflect()
	fields := ra.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if !ra.Get(fd).Equal(rb.Get(fd)) {
			out = append(out, string(fd.Name()))
		}
	}
	return out
}
