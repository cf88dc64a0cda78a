package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/termivar/distributed/client"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/internal/wireerr"
	"github.com/termivar/distributed/node"
	"github.com/termivar/distributed/server"
)

// clusterFlags are serve's multi-node options (docs/node.md, "Clusters").
type clusterFlags struct {
	peers        string
	join         string
	joinKey      string
	joinKeyFile  string
	secretFile   string
	advertiseURL string
	raftTimeout  time.Duration

	// Tests hand in pre-opened port-0 listeners and quiet raft.
	apiListener, raftListener net.Listener
	raftLog                   io.Writer
}

func addClusterFlags(fs *flag.FlagSet, c *clusterFlags) {
	fs.StringVar(&c.peers, "peers", "", "static cluster bootstrap: id1=raftaddr1,id2=raftaddr2,... (the same list on every member, itself included; needs --cluster-secret-file)")
	fs.StringVar(&c.join, "join", "", "join the cluster through the API URL of any member (comma-separated URLs allowed)")
	fs.StringVar(&c.joinKey, "join-key", "", "admin key of the default tenant used by --join (default: env "+client.EnvKey+")")
	fs.StringVar(&c.joinKeyFile, "join-key-file", "", "file holding the --join admin key")
	fs.StringVar(&c.secretFile, "cluster-secret-file", "", "cluster secret shared by every member (at least 32 random bytes, e.g. head -c 32 /dev/urandom)")
	fs.StringVar(&c.advertiseURL, "advertise-url", "", "API URL other members forward to (default: scheme://api-addr)")
	fs.DurationVar(&c.raftTimeout, "raft-timeout", 0, "raft heartbeat and election timeout (default 300ms single node, 1s cluster)")
}

// clustered reports whether the node runs with --peers or --join.
func (c clusterFlags) clustered() bool { return c.peers != "" || c.join != "" }

// joinKeyValue resolves the --join key: flag, file, environment.
func (c clusterFlags) joinKeyValue() (string, error) {
	switch {
	case c.joinKey != "":
		return strings.TrimSpace(c.joinKey), nil
	case c.joinKeyFile != "":
		return client.LoadKey(c.joinKeyFile)
	case os.Getenv(client.EnvKey) != "":
		return strings.TrimSpace(os.Getenv(client.EnvKey)), nil
	}
	return "", errors.New("--join needs an admin key of the default tenant: --join-key, --join-key-file or " + client.EnvKey)
}

// apply fills the cluster part of cfg and returns the context node.Open
// waits under: a single node gets 60 s; a cluster member waits for its
// peers as long as the process runs.
func (c clusterFlags) apply(ctx context.Context, cfg *node.Config, logger *slog.Logger, tlsConf *tls.Config) (context.Context, context.CancelFunc, error) {
	cfg.SharedSecretFile = c.secretFile
	cfg.RaftTimeout = c.raftTimeout
	cfg.RaftListener = c.raftListener
	if c.raftLog != nil {
		cfg.RaftLogOutput = c.raftLog
		cfg.RaftLogger = nil // NB: raft's own output goes to raftLog, not the logger
	}
	if c.peers != "" && c.join != "" {
		return nil, nil, errors.New("--peers and --join exclude each other")
	}
	if c.peers != "" {
		peers, err := node.ParsePeers(c.peers)
		if err != nil {
			return nil, nil, err
		}
		cfg.Peers = peers
	}
	if c.join != "" {
		cfg.Join = c.joinFunc(cfg.APIURL, cfg.MaxVersion(), logger, tlsConf)
	}
	if c.clustered() {
		cfg.RegisterSelf = registerSelf(cfg.NodeID, cfg.APIURL, cfg.MaxVersion(), filepath.Join(cfg.DataDir, node.AdminKeyFile), tlsConf)
	}
	if !c.clustered() {
		ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		return ctx, cancel, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	return ctx, cancel, nil
}

// joinReplays bounds the Joins a joiner sends again after one whose
// outcome is unknown.
const joinReplays = 5

// joinFunc calls Cluster.Join on a member (which forwards to the leader):
// credential_only for node.JoinCredential, with the raft address for
// node.JoinMember. A join_unverified refusal is returned wrapping
// node.ErrJoinerUnverified.
func (c clusterFlags) joinFunc(apiURL string, version uint32, logger *slog.Logger, tlsConf *tls.Config) node.JoinFunc {
	return func(ctx context.Context, mode node.JoinMode, nodeID, raftAddr string) ([]byte, error) {
		key, err := c.joinKeyValue()
		if err != nil {
			return nil, err
		}
		cfg := client.Config{ServerURL: c.join, Key: key, MaxAttempts: 30, MaxBackoff: time.Second, Logger: logger}
		if tlsConf != nil {
			cfg.HTTPClient = &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConf, ForceAttemptHTTP2: true}}
		}
		cl, err := client.New(cfg)
		if err != nil {
			return nil, err
		}
		defer cl.Close()
		req := &pb.JoinRequest{NodeId: nodeID, CredentialOnly: true}
		if mode == node.JoinMember {
			req = &pb.JoinRequest{NodeId: nodeID, RaftAddr: raftAddr, ApiUrl: apiURL, MaxVersion: version}
		}
		logger.Info("joining the cluster", "via", c.join, "node_id", nodeID, "raft", raftAddr, "api", apiURL, "credential_only", req.CredentialOnly)
		res, err := cl.Join(ctx, req)
		for i := 0; i < joinReplays && client.MayHaveApplied(err) && ctx.Err() == nil; i++ {
			// NB: the client does not re-send a membership change after an
			// unknown outcome (a leader that lost leadership with the
			// entry appended); this node's own Join again is harmless.
			res, err = cl.Join(ctx, req)
		}
		if d, ok := wireerr.DetailOf(err); ok && d.GetKind() == server.KindJoinUnverified {
			return nil, node.JoinerUnverified(d.GetReason())
		}
		if err != nil {
			return nil, err
		}
		return res.GetClusterSecret(), nil
	}
}

// registerSelf records a follower's API URL and supported cluster version
// through the leader with the node's admin key (Cluster.Join without a
// raft address).
func registerSelf(nodeID, apiURL string, version uint32, keyFile string, tlsConf *tls.Config) func(context.Context, string, []byte) error {
	return func(ctx context.Context, leader string, incarnation []byte) error {
		key, err := client.LoadKey(keyFile)
		if err != nil {
			return err
		}
		cfg := client.Config{ServerURL: leader, Key: key, MaxAttempts: 1}
		if tlsConf != nil {
			cfg.HTTPClient = &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConf, ForceAttemptHTTP2: true}}
		}
		cl, err := client.New(cfg)
		if err != nil {
			return err
		}
		defer cl.Close()
		_, err = cl.Join(ctx, &pb.JoinRequest{NodeId: nodeID, ApiUrl: apiURL, Incarnation: incarnation, MaxVersion: version})
		return err
	}
}

// ensureAdminKeyFile makes sure DIR/admin.key holds an admin key of the
// default tenant: a --peers member writes the key every member derives
// from the shared secret and the epoch; a joiner writes the key it joined
// with; a single node creates one on first start.
func ensureAdminKeyFile(ctx context.Context, n *node.Node, path string, c clusterFlags) (bool, error) {
	var key string
	switch {
	case c.peers != "":
		key = n.FirstAdminKey()
	case c.join != "":
		if _, err := os.Stat(path); err == nil {
			return false, nil
		}
		k, err := c.joinKeyValue()
		if err != nil {
			return false, err
		}
		key = k
	default:
		return server.EnsureAdminKey(ctx, n, path)
	}
	if _, err := os.Stat(path); err == nil {
		return false, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return false, err
	}
	if key == "" {
		return false, fmt.Errorf("no admin key to write to %s", path)
	}
	return true, node.WriteFileAtomic(path, []byte(key+"\n"), 0o600)
}

// membersLine renders a cluster's members for `status`: "n1 (leader),
// n2, n3 (nonvoter)".
func membersLine(ms []*pb.ClusterMember) string {
	parts := make([]string, len(ms))
	for i, m := range ms {
		var tags []string
		if m.GetLeader() {
			tags = append(tags, "leader")
		}
		if m.GetSuffrage() != "voter" {
			tags = append(tags, m.GetSuffrage())
		}
		parts[i] = m.GetNodeId()
		if len(tags) > 0 {
			parts[i] += " (" + strings.Join(tags, ", ") + ")"
		}
		if m.GetApiUrl() != "" {
			parts[i] += " " + m.GetApiUrl()
		}
	}
	return strings.Join(parts, ", ")
}
