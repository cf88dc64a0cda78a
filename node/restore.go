package node

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/internal/apikey"
	"github.com/termivar/distributed/internal/backup"
	"github.com/termivar/distributed/internal/token"
	"github.com/termivar/distributed/raftfsm"
)

// ErrRestore is wrapped by every refusal of Restore: a damaged backup, a
// state this binary cannot restore, or a data dir that is in use.
var ErrRestore = errors.New("node: restore refused")

// RestoreConfig says what Restore builds.
type RestoreConfig struct {
	// Backup is the backup file (internal/backup).
	Backup []byte
	// DataDir is the new data dir: it must not exist, or be empty.
	DataDir string
	// NodeID and RaftAddr are the one voter of the new cluster (defaults
	// "node1", "127.0.0.1:7421"); serve must run with the same ones.
	NodeID, RaftAddr string
	// SharedSecretFile, when set, is the new cluster's secret (copied to
	// DIR/cluster.secret); otherwise 32 random bytes.
	SharedSecretFile string
	// AdminKey, when set, must be a live admin key of the system tenant in
	// the backup; it is written to DIR/admin.key (0600), where serve and
	// the CLI look for it.
	AdminKey string
	// NowFunc is the clock of the identity's creation time (default
	// time.Now).
	NowFunc func() time.Time
}

// RestoreResult describes the data dir Restore built.
type RestoreResult struct {
	// Header is the backup's header (the old epoch, index, taken by whom).
	Header *pb.BackupHeader
	// Epoch is the new cluster's epoch; Index the raft index of its
	// snapshot (the backup's applied index).
	Epoch []byte
	Index uint64
	// State is the restored FSM state (raftfsm.PrepareRestore).
	State []byte
}

// Restore builds the data dir of a new one-voter cluster from a backup
// (docs/operations.md, "Restore"): the backup's state with a new epoch
// (every token of the old cluster is refused) and an empty node table, as
// a raft snapshot whose configuration is this node alone; a new identity
// and cluster secret. Start it with `serve --data-dir DIR --node-id ID
// --raft-addr ADDR`, then grow it with --join.
//
// Everything is built in a temporary directory beside DataDir and renamed
// into place only when complete and fsynced: a damaged backup, a crash or
// any error leaves no DataDir (or the empty one that was there) and no
// temporary directory. Refusals wrap ErrRestore (and backup.ErrDamaged
// for a damaged file).
func Restore(cfg RestoreConfig) (RestoreResult, error) {
	cfg.NodeID = cmp.Or(cfg.NodeID, "node1")
	cfg.RaftAddr = cmp.Or(cfg.RaftAddr, "127.0.0.1:7421")
	if cfg.NowFunc == nil {
		cfg.NowFunc = time.Now
	}
	h, state, err := backup.Decode(cfg.Backup)
	if err != nil {
		return RestoreResult{}, fmt.Errorf("%w: %w", ErrRestore, err)
	}
	epoch := make([]byte, raftfsm.EpochBytes)
	if _, err := rand.Read(epoch); err != nil {
		return RestoreResult{}, err
	}
	restored, err := raftfsm.PrepareRestore(state, epoch)
	if err != nil {
		return RestoreResult{}, fmt.Errorf("%w: %w", ErrRestore, err)
	}
	if err := checkRestoreTarget(cfg.DataDir); err != nil {
		return RestoreResult{}, err
	}
	if err := checkRestoredAdminKey(restored, cfg.AdminKey); err != nil {
		return RestoreResult{}, err
	}
	secret, err := restoreSecret(cfg.SharedSecretFile)
	if err != nil {
		return RestoreResult{}, fmt.Errorf("%w: %w", ErrRestore, err)
	}
	index := max(h.GetAppliedIndex(), 1)
	tmp, err := os.MkdirTemp(filepath.Dir(filepath.Clean(cfg.DataDir)), "."+filepath.Base(cfg.DataDir)+".restore-")
	if err != nil {
		return RestoreResult{}, err
	}
	if err := buildRestoredDir(tmp, cfg, secret, epoch, restored, index); err != nil {
		_ = os.RemoveAll(tmp)
		return RestoreResult{}, err
	}
	if err := os.Rename(tmp, cfg.DataDir); err != nil {
		_ = os.RemoveAll(tmp)
		return RestoreResult{}, fmt.Errorf("%w: %w", ErrRestore, err)
	}
	if err := SyncDir(filepath.Dir(filepath.Clean(cfg.DataDir))); err != nil {
		return RestoreResult{}, err
	}
	return RestoreResult{Header: h, Epoch: epoch, Index: index, State: restored}, nil
}

// checkRestoredAdminKey refuses an admin key ("" passes) that is not a
// live admin key of the system tenant in the restored state.
func checkRestoredAdminKey(state []byte, key string) error {
	if key == "" {
		return nil
	}
	f := raftfsm.New(raftfsm.Options{})
	if err := f.RestoreState(state); err != nil {
		return fmt.Errorf("%w: %w", ErrRestore, err)
	}
	id, secret, err := apikey.Parse(key)
	if err == nil {
		k, ok := f.Key(id)
		if ok && k.Tenant == raftfsm.SystemTenant && k.Role == raftfsm.RoleAdmin && apikey.Verify(k.Hash, secret) {
			return nil
		}
	}
	return fmt.Errorf("%w: the admin key is not a live admin key of the %s tenant in the backup", ErrRestore, raftfsm.SystemTenant)
}

// checkRestoreTarget refuses a data dir that exists and is not empty.
func checkRestoreTarget(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrRestore, err)
	}
	if len(ents) > 0 {
		return fmt.Errorf("%w: %s exists and is not empty: restore into a new data dir (nothing was changed)", ErrRestore, dir)
	}
	return nil
}

// restoreSecret returns the new cluster's secret: the shared file's, or
// 32 random bytes.
func restoreSecret(sharedFile string) ([]byte, error) {
	if sharedFile != "" {
		return readSecretFile(sharedFile)
	}
	secret := make([]byte, token.MinSecretBytes)
	if _, err := rand.Read(secret); err != nil {
		return nil, err
	}
	return secret, nil
}

// buildRestoredDir writes the identity, the secret and the raft snapshot
// into dir (0700), every file fsynced.
func buildRestoredDir(dir string, cfg RestoreConfig, secret, epoch, state []byte, index uint64) error {
	if err := os.Chmod(dir, 0o700); err != nil {
		return err
	}
	id, err := newIdentity(cfg.NodeID, cfg.NowFunc())
	if err != nil {
		return err
	}
	id.ClusterEpoch = hex.EncodeToString(epoch)
	id.SecretFingerprint = secretFingerprint(secret)
	if err := id.write(dir); err != nil {
		return err
	}
	if err := WriteFileAtomic(filepath.Join(dir, SecretFile), secret, 0o600); err != nil {
		return err
	}
	if cfg.AdminKey != "" {
		if err := WriteFileAtomic(filepath.Join(dir, AdminKeyFile), []byte(cfg.AdminKey+"\n"), 0o600); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, raftDir, "wal"), 0o700); err != nil {
		return err
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(filepath.Join(dir, raftDir), 2, hclog.NewNullLogger())
	if err != nil {
		return err
	}
	conf := raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(cfg.NodeID), Address: raft.ServerAddress(cfg.RaftAddr)}}}
	_, trans := raft.NewInmemTransport(raft.ServerAddress(cfg.RaftAddr))
	defer trans.Close()
	// NB: term 1; the node's first election starts term 2 above it.
	sink, err := snaps.Create(raft.SnapshotVersionMax, index, 1, conf, index, trans)
	if err != nil {
		return err
	}
	if _, err := sink.Write(state); err != nil {
		_ = sink.Cancel()
		return err
	}
	if err := sink.Close(); err != nil {
		return err
	}
	for _, d := range []string{filepath.Join(dir, raftDir, "snapshots"), filepath.Join(dir, raftDir), dir} {
		if err := SyncDir(d); err != nil {
			return err
		}
	}
	return nil
}

// ReadBackupFile reads a backup file, refusing one larger than any backup.
func ReadBackupFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, backup.MaxStateBytes+backup.MaxHeaderBytes+64+1))
	if err != nil {
		return nil, err
	}
	if len(b) > backup.MaxStateBytes+backup.MaxHeaderBytes+64 {
		return nil, fmt.Errorf("%w: %s is larger than any backup", ErrRestore, path)
	}
	return b, nil
}
