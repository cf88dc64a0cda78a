package node

// Data directory identity: every start that would silently serve the wrong
// thing (another node's data dir, a lost raft/ directory, a replaced or
// missing secret, unsafe permissions, a second process) is refused with
// ErrDataDir and a message naming the file, and changes nothing on disk.

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func randomSecret(t testing.TB) []byte {
	t.Helper()
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// tryOpen opens a node on dir and returns the error (closing a node that
// opened).
func tryOpen(t *testing.T, dir string, mut func(*Config)) error {
	t.Helper()
	n, err := openNodeErr(dir, mut)
	if err == nil {
		n.Close()
	}
	return err
}

// dirListing returns every file under dir with its content, to prove a
// refused start changed nothing.
func dirListing(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		out[p] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func wantRefused(t *testing.T, err error, words ...string) {
	t.Helper()
	if !errors.Is(err, ErrDataDir) {
		t.Fatalf("Open = %v, want ErrDataDir", err)
	}
	for _, w := range words {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not mention %q", err, w)
		}
	}
}

func TestIdentity_WrittenAtBootstrapAndKept(t *testing.T) {
	dir := t.TempDir()
	n := openNode(t, dir, nil)
	epoch := n.FSM().Epoch()
	inc := n.Incarnation()
	n.Close()
	id, err := readIdentity(dir)
	if err != nil || id == nil {
		t.Fatalf("readIdentity = %v, %v", id, err)
	}
	if id.NodeID != "node1" || len(inc) != incarnationBytes || !bytes.Equal(id.incarnation(), inc) ||
		id.ClusterEpoch == "" || id.SecretFingerprint == "" {
		t.Fatalf("identity = %+v", id)
	}
	if st, err := os.Stat(filepath.Join(dir, IdentityFile)); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("identity file mode: %v, %v", st, err)
	}
	n = openNode(t, dir, nil)
	defer n.Close()
	if !bytes.Equal(n.Incarnation(), inc) || !bytes.Equal(n.FSM().Epoch(), epoch) {
		t.Fatal("a restart changed the incarnation or the epoch")
	}
}

func TestIdentity_RefusesOtherNodeID(t *testing.T) {
	dir := t.TempDir()
	openNode(t, dir, nil).Close()
	before := dirListing(t, dir)
	err := tryOpen(t, dir, func(c *Config) { c.NodeID = "node2" })
	wantRefused(t, err, `belongs to node "node1"`, "--node-id node1")
	if after := dirListing(t, dir); len(after) != len(before) {
		t.Fatalf("a refused start changed the data dir: %d files, was %d", len(after), len(before))
	}
}

func TestIdentity_RefusesLostRaftState(t *testing.T) {
	for _, lost := range []string{"raft", filepath.Join("raft", "wal")} {
		t.Run(lost, func(t *testing.T) {
			dir := t.TempDir()
			openNode(t, dir, nil).Close()
			if err := os.RemoveAll(filepath.Join(dir, lost)); err != nil {
				t.Fatal(err)
			}
			before := dirListing(t, dir)
			err := tryOpen(t, dir, nil)
			wantRefused(t, err, "has no raft state", IdentityFile, "--force-new-cluster")
			if after := dirListing(t, dir); len(after) != len(before) {
				t.Fatal("a refused start changed the data dir")
			}
			// With the explicit flag a new, empty cluster starts (new epoch,
			// new incarnation).
			old, _ := readIdentity(dir)
			if err := tryOpen(t, dir, func(c *Config) { c.ForceNewCluster = true }); err != nil {
				t.Fatalf("--force-new-cluster: %v", err)
			}
			now, _ := readIdentity(dir)
			if now.Incarnation == old.Incarnation || now.ClusterEpoch == old.ClusterEpoch {
				t.Fatalf("forced new cluster kept the old identity: %+v", now)
			}
		})
	}
}

func TestIdentity_RefusesRemainsWithoutIdentity(t *testing.T) {
	// A data dir from before identity files (or with identity.json lost)
	// whose raft/ is gone: the secret alone proves it had a life.
	dir := t.TempDir()
	openNode(t, dir, nil).Close()
	for _, p := range []string{IdentityFile, "raft"} {
		if err := os.RemoveAll(filepath.Join(dir, p)); err != nil {
			t.Fatal(err)
		}
	}
	wantRefused(t, tryOpen(t, dir, nil), SecretFile)
}

func TestIdentity_LegacyDataDirGetsIdentity(t *testing.T) {
	dir := t.TempDir()
	n := openNode(t, dir, nil)
	epoch := n.FSM().Epoch()
	n.Close()
	if err := os.Remove(filepath.Join(dir, IdentityFile)); err != nil {
		t.Fatal(err)
	}
	n = openNode(t, dir, nil)
	n.Close()
	id, err := readIdentity(dir)
	if err != nil || id == nil || id.ClusterEpoch == "" || !bytes.Equal(n.FSM().Epoch(), epoch) {
		t.Fatalf("identity after a legacy start = %+v, %v", id, err)
	}
}

func TestIdentity_RefusesMissingOrReplacedSecret(t *testing.T) {
	dir := t.TempDir()
	openNode(t, dir, nil).Close()
	path := filepath.Join(dir, SecretFile)
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	wantRefused(t, tryOpen(t, dir, nil), SecretFile, "is missing")
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("a missing secret was regenerated")
	}
	if err := os.WriteFile(path, randomSecret(t), 0o600); err != nil {
		t.Fatal(err)
	}
	wantRefused(t, tryOpen(t, dir, nil), "not the one")
	if err := os.WriteFile(path, orig, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := tryOpen(t, dir, nil); err != nil {
		t.Fatalf("restored secret: %v", err)
	}
}

func TestIdentity_RefusesUnsafeSecretsAndDir(t *testing.T) {
	t.Run("secret readable by others", func(t *testing.T) {
		dir := t.TempDir()
		openNode(t, dir, nil).Close()
		if err := os.Chmod(filepath.Join(dir, SecretFile), 0o644); err != nil {
			t.Fatal(err)
		}
		wantRefused(t, tryOpen(t, dir, nil), "chmod 600")
	})
	t.Run("data dir writable by others", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.Chmod(dir, 0o777); err != nil {
			t.Fatal(err)
		}
		wantRefused(t, tryOpen(t, dir, nil), "chmod 700")
		if _, err := os.Stat(filepath.Join(dir, IdentityFile)); !errors.Is(err, os.ErrNotExist) {
			t.Fatal("a refused start wrote an identity")
		}
	})
	t.Run("low-entropy shared secret", func(t *testing.T) {
		for name, secret := range map[string][]byte{
			"zeros":    make([]byte, 32),
			"repeated": bytes.Repeat([]byte("abcd"), 16),
		} {
			base := t.TempDir()
			file := filepath.Join(base, "shared.secret")
			if err := os.WriteFile(file, secret, 0o600); err != nil {
				t.Fatal(err)
			}
			err := tryOpen(t, filepath.Join(base, "data"), func(c *Config) { c.SharedSecretFile = file })
			if !errors.Is(err, ErrDataDir) || !strings.Contains(err.Error(), "entropy") {
				t.Errorf("%s: Open = %v, want an entropy refusal", name, err)
			}
		}
	})
}

func TestIdentity_SecondOpenFailsAtOnce(t *testing.T) {
	dir := t.TempDir()
	n := openNode(t, dir, nil)
	defer n.Close()
	start := time.Now()
	err := tryOpen(t, dir, nil)
	wantRefused(t, err, "in use by PID")
	t.Logf("second open refused after %v", time.Since(start))
}

func TestCheckSecretEntropy(t *testing.T) {
	hexSecret := []byte("9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08")
	for name, c := range map[string]struct {
		b  []byte
		ok bool
	}{
		"random 32 bytes": {randomSecret(t), true},
		"64 hex digits":   {hexSecret, true},
		"32 zero bytes":   {make([]byte, 32), false},
		"two values":      {bytes.Repeat([]byte{1, 2}, 32), false},
	} {
		if err := checkSecretEntropy("s", c.b); (err == nil) != c.ok {
			t.Errorf("%s: checkSecretEntropy = %v, want ok %v", name, err, c.ok)
		}
	}
}

func TestPeersDiff(t *testing.T) {
	conf := raft.Configuration{Servers: []raft.Server{
		{ID: "n1", Address: "127.0.0.1:1"}, {ID: "n2", Address: "127.0.0.1:2"}, {ID: "n3", Address: "127.0.0.1:3"}}}
	same := []Peer{{"n1", "127.0.0.1:1"}, {"n2", "127.0.0.1:2"}, {"n3", "127.0.0.1:3"}}
	if d := peersDiff(same, conf); d != "" {
		t.Fatalf("peersDiff(same) = %q", d)
	}
	other := []Peer{{"n1", "127.0.0.1:1"}, {"n2", "127.0.0.1:9"}, {"n4", "127.0.0.1:4"}}
	want := "n2 is at 127.0.0.1:2, not 127.0.0.1:9; n4 is not a member; n3 (127.0.0.1:3) is a member but not listed"
	if d := peersDiff(other, conf); d != want {
		t.Fatalf("peersDiff = %q, want %q", d, want)
	}
}

func TestNode_VerifyRaftPeerRefusesReplacedDataDir(t *testing.T) {
	n := openNode(t, t.TempDir(), nil)
	defer n.Close()
	incA, incB := bytes.Repeat([]byte{1}, 16), bytes.Repeat([]byte{2}, 16)
	if err := n.setNodeInfo(context.Background(), "n9", "http://127.0.0.1:1", incA, 0); err != nil {
		t.Fatal(err)
	}
	if err := n.verifyRaftPeer("n9", incA); err != nil {
		t.Fatalf("recorded incarnation refused: %v", err)
	}
	if err := n.verifyRaftPeer("unknown", incB); err != nil {
		t.Fatalf("a node the cluster has not recorded yet was refused: %v", err)
	}
	err := n.verifyRaftPeer("n9", incB)
	if err == nil || !strings.Contains(err.Error(), "cluster remove n9") {
		t.Fatalf("replaced data dir: verifyRaftPeer = %v", err)
	}
}

// TestNode_IncarnationChangeOfMemberRefused: the leader never records a
// new incarnation for a member whose recorded one differs (a wiped member
// registering itself would make every member accept it); a member not
// recorded yet, the same incarnation, no incarnation, or a node that is
// not a member (removed: its record was forgotten) are let through. And
// a node that bootstrapped from --peers finds itself replaced when the
// node table records another incarnation for its ID.
func TestNode_IncarnationChangeOfMemberRefused(t *testing.T) {
	n := openNode(t, t.TempDir(), nil)
	defer n.Close()
	incA, incB := make([]byte, 16), make([]byte, 16)
	rand.Read(incA)
	rand.Read(incB)
	if err := n.setNodeInfo(context.Background(), "n9", "http://127.0.0.1:1", incA, 0); err != nil {
		t.Fatal(err)
	}
	err := n.checkIncarnationChange("n9", true, incB)
	if !errors.Is(err, ErrJoinerUnverified) || !strings.Contains(err.Error(), "cluster remove n9") {
		t.Fatalf("changed incarnation of a member: %v", err)
	}
	for _, c := range []struct {
		id     string
		member bool
		inc    []byte
	}{{"n9", true, incA}, {"n9", true, nil}, {"n9", false, incB}, {"n8", true, incB}} {
		if err := n.checkIncarnationChange(c.id, c.member, c.inc); err != nil {
			t.Errorf("checkIncarnationChange(%s, member %v, %x) = %v, want nil", c.id, c.member, c.inc, err)
		}
	}
	if err := replacedErr("n9", incA, incA); err != nil {
		t.Fatalf("replacedErr of the recorded incarnation = %v", err)
	}
	if err := replacedErr("n9", nil, incB); err != nil {
		t.Fatalf("replacedErr with no record = %v", err)
	}
	if err := replacedErr("n9", incA, incB); err == nil || !strings.Contains(err.Error(), "data dir was replaced") {
		t.Fatalf("replacedErr of another incarnation = %v", err)
	}
	// A single node did not bootstrap from --peers: never "replaced".
	if err := n.replacedDataDir(); err != nil {
		t.Fatalf("replacedDataDir of a single node = %v", err)
	}
}

// TestNode_RefusedBootstrappedNodeFails: a running node that bootstrapped
// from --peers and that members keep refusing past refusalGrace (its data
// dir was replaced, and it got in through a member whose node table
// lagged) fails like a damaged data dir and stops serving; a node that did
// not bootstrap from --peers (a joiner, a restart) is only refused, as a
// joiner may be for a moment.
func TestNode_RefusedBootstrappedNodeFails(t *testing.T) {
	n := openNode(t, t.TempDir(), nil)
	defer n.Close()
	reason := "node n1's data dir was replaced"
	n.lastRefusal.Store(&reason)
	n.firstRefusal.Store(time.Now().Add(-2 * refusalGrace).UnixNano())
	if !n.checkPeers() || n.Err() != nil {
		t.Fatalf("a node not bootstrapped from --peers failed on a refusal: %v", n.Err())
	}
	n.bootstrappedPeers.Store(true)
	if n.checkPeers() {
		t.Fatal("checkPeers kept a refused --peers node serving")
	}
	select {
	case <-n.Failed():
	default:
		t.Fatal("Failed is not closed")
	}
	if err := n.Err(); !errors.Is(err, ErrDataDir) || !strings.Contains(err.Error(), reason) {
		t.Fatalf("Err = %v, want ErrDataDir naming the refusal", err)
	}
}
