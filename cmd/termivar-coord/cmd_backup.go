package main

import (
	"context"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/termivar/distributed/client"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/gen/termivar/v1/termivarv1connect"
	"github.com/termivar/distributed/internal/backup"
	"github.com/termivar/distributed/node"
	"github.com/termivar/distributed/raftfsm"
)

// This file holds `backup` (Cluster.Backup into a file, verified before
// it gets its name) and `restore` (a new one-voter data dir from a backup
// file, node.Restore). docs/operations.md, "Back up" and "Restore".

const backupUsage = `usage: termivar-coord backup --out FILE [--server URL[,URL...]] [--key KEY] [TLS flags]

Streams a consistent copy of the whole cluster state from the leader (an
admin key of the default tenant) into FILE (0600), verified (SHA-256 and a
full state check) before it is renamed into place. Exit codes: 0 ok,
1 usage, 2 refused or damaged, 3 unreachable.`

const restoreUsage = `usage: termivar-coord restore --from FILE --data-dir DIR [--node-id ID] [--raft-addr ADDR] [--cluster-secret-file F] [--admin-key-file F]

Builds DIR (which must not exist, or be empty) as the data dir of a new
single-node cluster holding the backup's tenants, keys and tasks under a
new epoch: every lease, fence or receipt token of the old cluster is
refused; API keys stay valid. Start it with serve and the same --data-dir,
--node-id and --raft-addr, then grow it with --join. Exit codes: 0 ok,
1 usage, 2 refused (damaged backup, DIR in use).`

// newBackupFlagSet returns the backup command's flag set.
func newBackupFlagSet(c *clientFlags, out *string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("backup", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c.register(fs)
	fs.StringVar(out, "out", "", "backup file to write (must not exist)")
	fs.Usage = func() { fmt.Fprintln(stderr, backupUsage); fs.PrintDefaults() }
	return fs
}

func runBackup(args []string) int { return runBackupTo(args, os.Stdout, os.Stderr) }

// runBackupTo runs backup writing to stdout and stderr.
func runBackupTo(args []string, stdout, stderr io.Writer) int {
	var c clientFlags
	var out string
	fs := newBackupFlagSet(&c, &out, stderr)
	if err := fs.Parse(args); err != nil {
		return flagExit(err)
	}
	if out == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, backupUsage)
		return exitUsage
	}
	if _, err := os.Lstat(out); err == nil {
		fmt.Fprintf(stderr, "termivar-coord backup: %s exists; choose a new file\n", out)
		return exitUsage
	}
	key, err := c.apiKey()
	if err != nil {
		fmt.Fprintln(stderr, "termivar-coord backup:", err)
		return exitUsage
	}
	hc, err := c.httpClient(1)
	if err != nil {
		fmt.Fprintln(stderr, "termivar-coord backup:", err)
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var h *pb.BackupHeader
	for _, url := range strings.Split(c.server, ",") {
		cl := termivarv1connect.NewClusterClient(hc, strings.TrimSpace(url), connect.WithInterceptors(bearerInterceptor{key}))
		h, err = backupTo(ctx, cl, out)
		if connect.CodeOf(err) != connect.CodeUnavailable {
			break
		}
	}
	if errors.Is(err, backup.ErrDamaged) || errors.Is(err, raftfsm.ErrInvalidState) {
		fmt.Fprintln(stderr, "termivar-coord backup:", err)
		return exitRejected
	}
	if err != nil {
		return exitForTo(stderr, "backup", err)
	}
	fmt.Fprintf(stdout, "backup %s: cluster %s…, index %d, %d bytes of state, taken by %s\n",
		out, hex.EncodeToString(h.GetEpochId())[:8], h.GetAppliedIndex(), h.GetStateBytes(), h.GetNodeId())
	return exitOK
}

// flagExit is the exit code of a flag parse error (--help: 0).
func flagExit(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	return exitUsage
}

// backupTo streams the backup into a temporary file beside out, verifies
// it (checksum, and the state restores with every invariant) and renames
// it to out; on any failure the temporary file is removed.
func backupTo(ctx context.Context, cl termivarv1connect.ClusterClient, out string) (*pb.BackupHeader, error) {
	tmp, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".partial-")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name()) // NB: a no-op once renamed
	defer tmp.Close()
	if err := tmp.Chmod(0o600); err != nil {
		return nil, err
	}
	stream, err := cl.Backup(ctx, connect.NewRequest(&pb.BackupRequest{}))
	if err != nil {
		return nil, err
	}
	defer stream.Close()
	var b []byte
	for stream.Receive() {
		b = append(b, stream.Msg().GetData()...)
		if len(b) > backup.MaxStateBytes+backup.MaxHeaderBytes+64 {
			return nil, fmt.Errorf("%w: the stream is longer than any backup", backup.ErrDamaged)
		}
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	h, state, err := backup.Decode(b)
	if err != nil {
		return nil, err
	}
	if err := raftfsm.New(raftfsm.Options{}).RestoreState(state); err != nil {
		return nil, fmt.Errorf("the backed-up state does not restore: %w", err)
	}
	if _, err := tmp.Write(b); err != nil {
		return nil, err
	}
	if err := tmp.Sync(); err != nil {
		return nil, err
	}
	if err := tmp.Close(); err != nil {
		return nil, err
	}
	// NB: Link, not Rename: it fails instead of replacing a file that
	// appeared at out meanwhile.
	if err := os.Link(tmp.Name(), out); err != nil {
		return nil, err
	}
	return h, node.SyncDir(filepath.Dir(out))
}

// restoreFlags are the restore command's flags.
type restoreFlags struct {
	from, dataDir, nodeID, raftAddr, secretFile, adminKeyFile string
}

// newRestoreFlagSet returns the restore command's flag set.
func newRestoreFlagSet(r *restoreFlags, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("restore", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&r.from, "from", "", "backup file written by termivar-coord backup")
	fs.StringVar(&r.dataDir, "data-dir", "", "new data directory (must not exist, or be empty)")
	fs.StringVar(&r.nodeID, "node-id", "node1", "raft node ID of the new cluster's one voter (serve --node-id)")
	fs.StringVar(&r.raftAddr, "raft-addr", "127.0.0.1:7421", "its raft address (serve --raft-addr)")
	fs.StringVar(&r.secretFile, "cluster-secret-file", "", "cluster secret of the new cluster (default: 32 new random bytes)")
	fs.StringVar(&r.adminKeyFile, "admin-key-file", "", "an admin key of the default tenant in the backup, written to DIR/admin.key (checked against the backup)")
	fs.Usage = func() { fmt.Fprintln(stderr, restoreUsage); fs.PrintDefaults() }
	return fs
}

func runRestore(args []string) int { return runRestoreTo(args, os.Stdout, os.Stderr) }

// runRestoreTo runs restore writing to stdout and stderr.
func runRestoreTo(args []string, stdout, stderr io.Writer) int {
	var r restoreFlags
	fs := newRestoreFlagSet(&r, stderr)
	if err := fs.Parse(args); err != nil {
		return flagExit(err)
	}
	if r.from == "" || r.dataDir == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, restoreUsage)
		return exitUsage
	}
	b, err := node.ReadBackupFile(r.from)
	if err != nil {
		fmt.Fprintln(stderr, "termivar-coord restore:", err)
		return exitRejected
	}
	var adminKey string
	if r.adminKeyFile != "" {
		if adminKey, err = client.LoadKey(r.adminKeyFile); err != nil {
			fmt.Fprintln(stderr, "termivar-coord restore:", err)
			return exitUsage
		}
	}
	res, err := node.Restore(node.RestoreConfig{Backup: b, DataDir: r.dataDir, NodeID: r.nodeID, RaftAddr: r.raftAddr,
		SharedSecretFile: r.secretFile, AdminKey: adminKey, NowFunc: time.Now})
	if err != nil {
		fmt.Fprintln(stderr, "termivar-coord restore:", err)
		return exitRejected
	}
	fmt.Fprintf(stdout, "restored %s into %s: backup of cluster %s… at index %d (taken by %s); new cluster %s…\n"+
		"start it: termivar-coord serve --data-dir %s --node-id %s --raft-addr %s\n",
		r.from, r.dataDir, hex.EncodeToString(res.Header.GetEpochId())[:8], res.Header.GetAppliedIndex(), res.Header.GetNodeId(),
		hex.EncodeToString(res.Epoch)[:8], r.dataDir, r.nodeID, r.raftAddr)
	return exitOK
}
