package server

import (
	"context"
	"crypto/sha256"
	"errors"
	"os"
	"strings"

	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/internal/apikey"
	"github.com/termivar/distributed/node"
	"github.com/termivar/distributed/raftfsm"
)

// EnsureAdminKey makes sure path holds an admin key of the system tenant
// that the cluster knows. On first start it generates one, writes it (0600,
// atomically) and only then replicates its hash, so a crash in between
// leaves a file that the next start registers — but only while the cluster
// has no key at all: once bootstrap is over, a key planted in the file is
// never registered (it is ignored with a warning by the caller seeing
// ErrAdminKeyUnknown). It returns whether a key was created.
func EnsureAdminKey(ctx context.Context, n Backend, path string) (bool, error) {
	data, err := os.ReadFile(path)
	switch {
	case err == nil:
		if err := node.CheckPrivateFile(path); err != nil {
			return false, err
		}
		id, secret, perr := apikey.Parse(strings.TrimSpace(string(data)))
		if perr != nil {
			return false, errors.New("server: admin key file is malformed")
		}
		if _, ok := n.Reads().Key(id); ok {
			return false, nil
		}
		if n.Reads().KeyCount() > 0 {
			return false, ErrAdminKeyUnknown
		}
		sum := sha256.Sum256([]byte(secret))
		return false, proposeKey(ctx, n, id, sum[:])
	case !errors.Is(err, os.ErrNotExist):
		return false, err
	}
	if n.Reads().KeyCount() > 0 {
		// NB: the file was deleted after bootstrap; a new admin key is not
		// minted on the side (keys are created with an admin key).
		return false, ErrAdminKeyUnknown
	}
	g, err := apikey.Generate(nil)
	if err != nil {
		return false, err
	}
	if err := node.WriteFileAtomic(path, []byte(g.Key+"\n"), 0o600); err != nil {
		return false, err
	}
	return true, proposeKey(ctx, n, g.ID, g.Hash[:])
}

// ErrAdminKeyUnknown is returned by EnsureAdminKey when the admin key file
// is missing or holds a key the cluster does not know after bootstrap: the
// file is not (re)registered, because only bootstrap may mint the first
// admin key.
var ErrAdminKeyUnknown = errors.New("server: the admin key file is missing or holds a key this cluster does not know; it is not registered after bootstrap (create keys with an existing admin key)")

func proposeKey(ctx context.Context, n Backend, id string, hash []byte) error {
	err := raftfsm.ProposalErr(n.Propose(ctx, &pb.Command{Op: &pb.Command_CreateKey{CreateKey: &pb.CreateKey{
		KeyId: id, SecretHash: hash, KeyTenant: raftfsm.SystemTenant, Role: apikey.RoleAdmin.String()}}}))
	if errors.Is(err, raftfsm.ErrKeyExists) {
		return nil
	}
	return err
}
