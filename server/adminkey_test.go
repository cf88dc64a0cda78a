package server

// Only bootstrap mints the first admin key: a key planted in admin.key (or
// a deleted file) after bootstrap is never registered.

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/termivar/distributed/internal/apikey"
	"github.com/termivar/distributed/node"
)

func TestEnsureAdminKey_OnlyAtBootstrap(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n, err := node.Open(ctx, node.Config{DataDir: dir, RaftAddr: "127.0.0.1:0", TickInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	path := filepath.Join(dir, node.AdminKeyFile)
	if created, err := EnsureAdminKey(ctx, n, path); err != nil || !created {
		t.Fatalf("first EnsureAdminKey = %v, %v", created, err)
	}
	if created, err := EnsureAdminKey(ctx, n, path); err != nil || created {
		t.Fatalf("restart EnsureAdminKey = %v, %v", created, err)
	}
	keys := n.FSM().KeyCount()
	planted, err := apikey.Generate(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(planted.Key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureAdminKey(ctx, n, path); !errors.Is(err, ErrAdminKeyUnknown) {
		t.Fatalf("planted key: EnsureAdminKey = %v, want ErrAdminKeyUnknown", err)
	}
	if _, ok := n.FSM().Key(planted.ID); ok || n.FSM().KeyCount() != keys {
		t.Fatal("a planted admin key was registered")
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureAdminKey(ctx, n, path); !errors.Is(err, ErrAdminKeyUnknown) || n.FSM().KeyCount() != keys {
		t.Fatalf("deleted key file: EnsureAdminKey = %v, keys %d (was %d)", err, n.FSM().KeyCount(), keys)
	}
	if err := os.WriteFile(path, []byte(planted.Key+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureAdminKey(ctx, n, path); !errors.Is(err, node.ErrDataDir) {
		t.Fatalf("admin.key readable by others: EnsureAdminKey = %v, want ErrDataDir", err)
	}
}
