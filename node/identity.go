package node

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"time"
)

// Data directory identity. A data dir remembers which node of which
// cluster it belongs to, so that a start with the wrong --node-id, the
// wrong secret, a log of another cluster or a lost raft/ directory refuses
// loudly instead of silently serving something else (docs/node.md, "The
// data directory").
const (
	// IdentityFile is the data dir's identity (JSON, 0600).
	IdentityFile = "identity.json"
	// identityVersion is the format written by this build.
	identityVersion = 1
	// incarnationBytes is the size of a data dir's random incarnation ID.
	incarnationBytes = 16
	// minSecretEntropyBits is the least estimated entropy of a cluster
	// secret (Shannon estimate of its bytes times its length).
	minSecretEntropyBits = 128
)

// ErrDataDir is returned (wrapped, with a message naming the file and what
// to do) when the data directory cannot be used as it is: it belongs to
// another node or cluster, parts of it are missing, or its permissions or
// secrets are unsafe. serve exits 2 on it.
var ErrDataDir = errors.New("node: data directory refused")

// dataDirError wraps ErrDataDir with a message.
func dataDirError(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrDataDir}, args...)...)
}

// identity is the content of DIR/identity.json.
type identity struct {
	Version int    `json:"version"`
	NodeID  string `json:"node_id"`
	// Incarnation is random per data dir: a member wiped and started again
	// gets a new one, which the cluster (having recorded the old one in its
	// node table) refuses on the raft transport.
	Incarnation string `json:"incarnation"`
	// ClusterEpoch is the cluster's epoch (hex) once this node applied it.
	ClusterEpoch string `json:"cluster_epoch,omitempty"`
	// SecretFingerprint identifies the cluster secret (never the secret).
	SecretFingerprint string `json:"secret_fingerprint,omitempty"`
	Created           string `json:"created"`
}

func (id *identity) incarnation() []byte {
	b, _ := hex.DecodeString(id.Incarnation)
	return b
}

// newIdentity makes the identity of a new data dir.
func newIdentity(nodeID string, now time.Time) (*identity, error) {
	inc := make([]byte, incarnationBytes)
	if _, err := rand.Read(inc); err != nil {
		return nil, err
	}
	return &identity{Version: identityVersion, NodeID: nodeID, Incarnation: hex.EncodeToString(inc),
		Created: now.UTC().Format(time.RFC3339)}, nil
}

// readIdentity returns the data dir's identity, or nil when it has none.
func readIdentity(dir string) (*identity, error) {
	path := filepath.Join(dir, IdentityFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var id identity
	if err := json.Unmarshal(b, &id); err != nil {
		return nil, dataDirError("%s is damaged (%v): restore it from a backup of this data dir, or wipe the data dir and re-join", path, err)
	}
	if id.Version != identityVersion || id.NodeID == "" || len(id.incarnation()) != incarnationBytes {
		return nil, dataDirError("%s is not an identity this build understands (version %d)", path, id.Version)
	}
	return &id, nil
}

// write stores the identity atomically (0600).
func (id *identity) write(dir string) error {
	b, err := json.MarshalIndent(id, "", "  ")
	if err != nil {
		return err
	}
	return WriteFileAtomic(filepath.Join(dir, IdentityFile), append(b, '\n'), 0o600)
}

// secretFingerprint names a secret without revealing it: the first 16
// bytes of SHA-256("termivar/v1 secret fingerprint" || secret), hex.
func secretFingerprint(secret []byte) string {
	h := sha256.New()
	h.Write([]byte("termivar/v1 secret fingerprint"))
	h.Write(secret)
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// checkSecretEntropy refuses secrets that are obviously not random (32
// zero bytes, a repeated word): their Shannon estimate times their length
// must reach minSecretEntropyBits. 32 random bytes estimate ≈ 150 bits, 64
// random hex digits ≈ 250.
func checkSecretEntropy(path string, secret []byte) error {
	var counts [256]int
	for _, b := range secret {
		counts[b]++
	}
	n := float64(len(secret))
	bits := 0.0
	for _, c := range counts {
		if c > 0 {
			p := float64(c) / n
			bits -= p * math.Log2(p)
		}
	}
	if p := period(secret); p > 0 {
		return dataDirError("%s repeats a %d-byte pattern: use 32 random bytes, e.g. head -c 32 /dev/urandom", path, p)
	}
	if bits*n < minSecretEntropyBits {
		return dataDirError("%s has too little entropy (≈%.0f bits estimated, at least %d needed): use 32 random bytes, e.g. head -c 32 /dev/urandom", path, bits*n, minSecretEntropyBits)
	}
	return nil
}

// period returns the shortest p ≤ len(b)/2 such that b repeats every p
// bytes, or 0 when b is not such a repetition.
func period(b []byte) int {
	for p := 1; p <= len(b)/2; p++ {
		if bytes.Equal(b[p:], b[:len(b)-p]) {
			return p
		}
	}
	return 0
}

// CheckPrivateFile refuses, like ssh, a secret or key file that group or
// others may read or write.
func CheckPrivateFile(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if st.Mode().Perm()&0o077 != 0 {
		return dataDirError("%s is accessible by group or others (mode %04o): chmod 600 %s", path, st.Mode().Perm(), path)
	}
	return nil
}

// checkDataDirMode refuses a data dir that group or others may write.
func checkDataDirMode(dir string) error {
	st, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return dataDirError("%s is not a directory", dir)
	}
	if st.Mode().Perm()&0o022 != 0 {
		return dataDirError("%s is writable by group or others (mode %04o): chmod 700 %s", dir, st.Mode().Perm(), dir)
	}
	return nil
}

// hasRaftFiles reports whether the data dir holds any raft state: a WAL
// segment, raft-wal's meta DB (which lists the segments: with segments
// lost, the byte scan names them) or a snapshot.
func hasRaftFiles(dir string) (bool, error) {
	for _, pattern := range []string{
		filepath.Join(dir, raftDir, "wal", "*.wal"),
		filepath.Join(dir, raftDir, "wal", "wal-meta.db"),
		filepath.Join(dir, raftDir, "snapshots", "*", "meta.json"),
	} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			return false, err
		}
		if len(m) > 0 {
			return true, nil
		}
	}
	return false, nil
}

// remains lists the files of a data dir that prove it had a life.
func remains(dir string) []string {
	var out []string
	for _, f := range []string{IdentityFile, SecretFile, AdminKeyFile, "audit.log"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			out = append(out, f)
		}
	}
	return out
}

// prepareIdentity runs before anything in the data dir is created or
// opened: it checks the identity against the configuration and the raft
// state present, and returns the identity to use (new or existing) and
// whether the data dir is established — it served a cluster once (its
// identity names the epoch; for a data dir from before identity files: it
// has raft files), so its secret must not be replaced.
func prepareIdentity(cfg Config) (_ *identity, established bool, err error) {
	id, err := readIdentity(cfg.DataDir)
	if err != nil {
		return nil, false, err
	}
	raftState, err := hasRaftFiles(cfg.DataDir)
	if err != nil {
		return nil, false, err
	}
	established = (id != nil && id.ClusterEpoch != "" && raftState) || (id == nil && raftState)
	if id != nil && id.NodeID != cfg.NodeID {
		return nil, false, dataDirError("%s belongs to node %q, not %q: start it with --node-id %s, or use another --data-dir",
			cfg.DataDir, id.NodeID, cfg.NodeID, id.NodeID)
	}
	if !raftState && !cfg.ForceNewCluster {
		if err := checkNoRemains(cfg.DataDir, id); err != nil {
			return nil, false, err
		}
	}
	if id == nil || (!raftState && cfg.ForceNewCluster) {
		if id, err = newIdentity(cfg.NodeID, cfg.NowFunc()); err != nil {
			return nil, false, err
		}
		if err := id.write(cfg.DataDir); err != nil {
			return nil, false, err
		}
	}
	return id, established, nil
}

// checkNoRemains refuses a data dir without raft state that shows it
// belonged to a cluster: serving would silently start a new, empty one.
func checkNoRemains(dir string, id *identity) error {
	var what []string
	if id != nil && id.ClusterEpoch != "" {
		what = append(what, IdentityFile+" (node "+id.NodeID+" of cluster "+id.ClusterEpoch[:8]+"…)")
	}
	if id == nil {
		what = remains(dir)
	}
	if len(what) == 0 {
		return nil
	}
	return dataDirError("%s has no raft state (%s is missing or empty) but holds %v: this data dir belonged to a cluster. "+
		"Restore %s from a backup; or, for a member of a multi-node cluster, remove it (termivar-coord cluster remove) and re-join it with --join on an empty data dir; "+
		"or start a new, empty cluster over these remains with --force-new-cluster",
		dir, filepath.Join(dir, raftDir), what, filepath.Join(dir, raftDir))
}

// checkSecretIdentity checks the secret against the identity's
// fingerprint, recording it on first use.
func (n *Node) checkSecretIdentity() error {
	if n.secret == nil {
		return nil
	}
	fp := secretFingerprint(n.secret)
	switch n.ident.SecretFingerprint {
	case fp:
		return nil
	case "":
		n.ident.SecretFingerprint = fp
		return n.ident.write(n.cfg.DataDir)
	}
	return dataDirError("the cluster secret (%s) is not the one %s was created with: restore the original secret file (every member shares it)",
		filepath.Join(n.cfg.DataDir, SecretFile), n.cfg.DataDir)
}

// checkEpochIdentity compares the applied cluster epoch with the
// identity's, recording it on first use.
func (n *Node) checkEpochIdentity() error {
	epoch := hex.EncodeToString(n.fsm.Epoch())
	switch n.ident.ClusterEpoch {
	case epoch:
		return nil
	case "":
		n.ident.ClusterEpoch = epoch
		return n.ident.write(n.cfg.DataDir)
	}
	return dataDirError("%s belongs to cluster %s…, but its raft log is of cluster %s…: the raft/ directory was replaced; restore the matching one or use another --data-dir",
		n.cfg.DataDir, n.ident.ClusterEpoch[:8], epoch[:8])
}

// Incarnation returns this data dir's incarnation ID.
func (n *Node) Incarnation() []byte { return n.ident.incarnation() }

// verifyRaftPeer refuses raft connections from a member whose data dir
// was replaced: the cluster recorded another incarnation for its node ID.
func (n *Node) verifyRaftPeer(peerID string, incarnation []byte) error {
	rec, _ := n.fsm.NodeIncarnation(peerID)
	return replacedErr(peerID, rec, incarnation)
}

// replacedErr says why node id presenting incarnation is refused when the
// node table records rec for it; nil when rec is empty (not recorded yet,
// or forgotten by a removal) or equal.
func replacedErr(id string, rec, incarnation []byte) error {
	if len(rec) == 0 || bytes.Equal(rec, incarnation) {
		return nil
	}
	return fmt.Errorf("node %s's data dir was replaced (the cluster knows incarnation %x…, it presents %x…): "+
		"remove it (termivar-coord cluster remove %s) and re-join it with --join", id, prefix4(rec), prefix4(incarnation), id)
}

// replacedDataDir returns a *DataDirError when this start bootstrapped a
// new data dir from --peers while the applied node table records another
// incarnation for this node ID: the node's data dir was wiped and it
// came back under its old identity, which the members refuse
// (verifyRaftPeer) — but one whose table lagged may have replicated to it
// before refusing. Such a node must not serve: waitReady gives up with it
// and the member loop fails the node. NB: only for such a start: a
// joiner, or a member restarting on its own raft state, may replay an
// older incarnation of its ID (removed, then re-joined) on the way.
func (n *Node) replacedDataDir() error {
	if !n.bootstrappedPeers.Load() {
		return nil
	}
	rec, _ := n.fsm.NodeIncarnation(n.cfg.NodeID)
	if err := replacedErr(n.cfg.NodeID, rec, n.Incarnation()); err != nil {
		return dataDirError("the cluster refuses this node: %v", err)
	}
	return nil
}

// raftRefused records that a member refused this node's raft connection
// (e.g. its data dir was replaced): logged loudly each time, and named by
// waitReady if the node cannot start. It is not fatal on its own: a
// member that has not applied a removal yet may refuse for a moment.
func (n *Node) raftRefused(reason string) {
	n.lastRefusal.Store(&reason)
	n.firstRefusal.CompareAndSwap(0, time.Now().UnixNano())
	n.log.Error("a cluster member refused this node's raft connection", "reason", reason)
}

// refusalGrace is how long a starting node keeps waiting while members
// refuse it before it gives up with their reason.
const refusalGrace = 10 * time.Second

// refusal returns the last reason a member refused this node and whether
// refusals have lasted longer than refusalGrace.
func (n *Node) refusal() (string, bool) {
	r := n.lastRefusal.Load()
	if r == nil {
		return "", false
	}
	return *r, time.Since(time.Unix(0, n.firstRefusal.Load())) > refusalGrace
}

func prefix4(b []byte) []byte {
	if len(b) > 4 {
		return b[:4]
	}
	return b
}
