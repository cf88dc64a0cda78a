// Tests written for the fresh mutant set of issue 14 (scripts/mutants.txt,
// "Fresh set"): each names the mutant it kills. They call the small pure
// checks directly (modes, log coverage, entry order, the store-failure
// streak), so they need no running raft.
package node

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestFresh_PrivateModes: a secret readable by its group and a data dir
// writable by its group are refused, not only those open to others.
// Kills fresh/node-secret-group-readable (`&0o007`) and
// fresh/node-datadir-group-writable (`&0o002`).
func TestFresh_PrivateModes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, SecretFile)
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		mode os.FileMode
		ok   bool
	}{{0o600, true}, {0o400, true}, {0o640, false}, {0o610, false}, {0o604, false}} {
		if err := os.Chmod(file, c.mode); err != nil {
			t.Fatal(err)
		}
		if err := CheckPrivateFile(file); (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrDataDir)) {
			t.Errorf("CheckPrivateFile(mode %04o) = %v, want ok=%v", c.mode, err, c.ok)
		}
	}
	sub := filepath.Join(dir, "data")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		mode os.FileMode
		ok   bool
	}{{0o700, true}, {0o750, true}, {0o755, true}, {0o770, false}, {0o720, false}, {0o702, false}} {
		if err := os.Chmod(sub, c.mode); err != nil {
			t.Fatal(err)
		}
		if err := checkDataDirMode(sub); (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrDataDir)) {
			t.Errorf("checkDataDirMode(mode %04o) = %v, want ok=%v", c.mode, err, c.ok)
		}
	}
}

// TestFresh_CheckCoverageEdges pins both bounds of checkCoverage: the log
// may start right after the snapshot (first == snapIndex+1) but not one
// index later, and the snapshot may reach the log's last index but not one
// past it. Kills fresh/verify-coverage-gap-off-by-one (`snapIndex+2 <
// first`) and fresh/verify-snapshot-ahead-off-by-one (`snapIndex > last+1`).
func TestFresh_CheckCoverageEdges(t *testing.T) {
	t.Parallel()
	stable := raft.NewInmemStore()
	for _, c := range []struct {
		name                   string
		first, last, snapIndex uint64
		ok                     bool
	}{
		{"log follows the snapshot", 11, 20, 10, true},
		{"one index missing between snapshot and log", 12, 20, 10, false},
		{"snapshot reaches the last entry", 1, 20, 20, true},
		{"snapshot one past the last entry", 1, 20, 21, false},
	} {
		err := checkCoverage("wal", "snaps", c.first, c.last, c.snapIndex, stable)
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrDamagedDataDir)) {
			t.Errorf("%s: checkCoverage(first %d, last %d, snapshot %d) = %v, want ok=%v", c.name, c.first, c.last, c.snapIndex, err, c.ok)
		}
	}
}

// TestFresh_CheckEntriesRefusesTermRegression: a log whose terms go down
// is damaged even when every entry decodes.
// Kills fresh/verify-term-regression-accepted (the `l.Term < prevTerm`
// check dropped).
func TestFresh_CheckEntriesRefusesTermRegression(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		terms []uint64
		ok    bool
	}{{[]uint64{1, 1, 2, 3}, true}, {[]uint64{1, 2, 2, 1}, false}} {
		logs := raft.NewInmemStore()
		for i, term := range c.terms {
			l := &raft.Log{Index: uint64(i + 1), Term: term, Type: raft.LogNoop}
			if err := logs.StoreLog(l); err != nil {
				t.Fatal(err)
			}
		}
		err := checkEntries("wal", logs, 1, uint64(len(c.terms)))
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrDamagedDataDir)) {
			t.Errorf("terms %v: checkEntries = %v, want ok=%v", c.terms, err, c.ok)
		}
	}
}

// TestFresh_StoreFailureStreakKeepsItsStart: the store-failure streak is
// dated from its first failed write; later failures do not move it (else
// a store that fails every write would never exceed the grace), and a
// success ends the streak. Kills fresh/health-streak-start-moves.
func TestFresh_StoreFailureStreakKeepsItsStart(t *testing.T) {
	t.Parallel()
	h := newHealth()
	t0 := time.Unix(1000, 0)
	boom := errors.New("disk full")
	h.storeResult(boom, t0)
	h.storeResult(boom, t0.Add(time.Second))
	h.storeResult(boom, t0.Add(2*time.Second))
	if since, err := h.storeFailure(); !since.Equal(t0) || !errors.Is(err, boom) {
		t.Fatalf("storeFailure = %v, %v, want %v, %v", since, err, t0, boom)
	}
	h.storeResult(nil, t0.Add(3*time.Second))
	if since, err := h.storeFailure(); !since.IsZero() || err != nil {
		t.Fatalf("after a success storeFailure = %v, %v, want healthy", since, err)
	}
	h.storeResult(boom, t0.Add(4*time.Second))
	if since, _ := h.storeFailure(); !since.Equal(t0.Add(4 * time.Second)) {
		t.Fatalf("a new streak starts at %v, want %v", since, t0.Add(4*time.Second))
	}
}
