// Tests for the published read tables (published.go). Goal: the lock-free
// reads (Key, Tenant, KeyCount, TenantNames, LastTime) see exactly the
// state at the end of the last applied entry (P1) — never a key revoked
// before the read began, always a key or tenant created before it, never a
// key without its tenant, never time going back — while applies run
// concurrently (run under -race: the readers take no lock). Method: every
// command in the package's tests goes through must/mustReject, which
// compare the published tables with the live ones (checkPublished); the
// stress test runs one applier goroutine (create key, enqueue with it,
// revoke it, now and then a new tenant) against reader goroutines that
// check what they see against counters the applier stores after each
// ApplyCommand returns.
package raftfsm

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// checkPublished reports where the published tables differ from the live
// ones (P1). Call it between applies. Above fullCheckRecords records it
// compares the counts only (must calls it after every command, and
// TestFSM_KeyTableBound makes 65 536 of them); fullPublished compares all.
func (f *FSM) checkPublished() error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if len(f.keys)+len(f.tenants) > fullCheckRecords {
		return f.countsPublished()
	}
	return f.fullPublished()
}

const fullCheckRecords = 1024

func (f *FSM) countsPublished() error {
	switch {
	case f.pubKeys.next != nil || f.pubTenants.next != nil:
		return fmt.Errorf("a next generation is pending between applies")
	case f.pubKeys.len() != len(f.keys) || f.pubTenants.len() != len(f.tenants):
		return fmt.Errorf("published %d keys and %d tenants, live %d and %d", f.pubKeys.len(), f.pubTenants.len(), len(f.keys), len(f.tenants))
	case f.lastTimePub.Load() != f.lastTime:
		return fmt.Errorf("published time %d, live %d", f.lastTimePub.Load(), f.lastTime)
	}
	return nil
}

// fullPublished is countsPublished plus every record (caller holds f.mu).
func (f *FSM) fullPublished() error {
	if err := f.countsPublished(); err != nil {
		return err
	}
	for id, k := range f.keys {
		p, ok := f.pubKeys.get(id)
		if !ok || p.ID != k.ID || !bytes.Equal(p.Hash, k.Hash) || p.Tenant != k.Tenant || p.Role != k.Role ||
			p.CreatedSecs != k.CreatedSecs || p.RevokedSecs != k.RevokedSecs {
			return fmt.Errorf("published key %s = %+v, %v; live %+v", id, p, ok, k)
		}
	}
	for name, t := range f.tenants {
		if p, ok := f.pubTenants.get(name); !ok || p != t {
			return fmt.Errorf("published tenant %s = %p, %v; live %p", name, p, ok, t)
		}
	}
	return nil
}

func mustPublished(t testing.TB, f *FSM) {
	t.Helper()
	if err := f.checkPublished(); err != nil {
		t.Fatal(err)
	}
}

// TestFSM_PublishedAfterRestore: RestoreState publishes the restored
// tables, and a revocation applied after it is visible at once.
func TestFSM_PublishedAfterRestore(t *testing.T) {
	t.Parallel()
	b := keysSetup(t)
	st, err := b.f.ExportState()
	if err != nil {
		t.Fatal(err)
	}
	f := New(Options{})
	if _, ok := f.Key("kprod"); ok {
		t.Fatal("a new FSM published kprod")
	}
	if err := f.RestoreState(st); err != nil {
		t.Fatal(err)
	}
	mustPublished(t, f)
	if _, ok := f.Key("kprod"); !ok {
		t.Fatal("Key(kprod) not found after restore")
	}
	if got := f.TenantNames(); fmt.Sprint(got) != "[acme default other]" {
		t.Fatalf("TenantNames() after restore = %v, want [acme default other]", got)
	}
	if f.LastTime() != b.f.LastTime() || f.LastTime() == 0 {
		t.Fatalf("LastTime() after restore = %d, want %d", f.LastTime(), b.f.LastTime())
	}
	rb := &testBundle{f: f, now: b.now}
	rb.must(t, revokeCmd("kadmin", "kprod"))
	if _, ok := f.Key("kprod"); ok {
		t.Fatal("Key(kprod) found after its revocation was applied")
	}
}

// stressCounters are what the applier has finished applying, stored after
// ApplyCommand returned: a read that loads one before it starts must see
// that much; and revoking, stored before the revocation is applied: a key
// a read misses must have been revoking by the time the read ended.
type stressCounters struct {
	created, revoking, revoked, tenants, now atomic.Int64
}

func stressKeyID(i int64) string    { return "sk" + strconv.FormatInt(i, 10) }
func stressTenantID(i int64) string { return "st" + strconv.FormatInt(i, 10) }

// TestFSM_PublishedReadsDuringApply runs lock-free reads against
// concurrent applies and checks each read against what was applied
// before it began and after it ended.
func TestFSM_PublishedReadsDuringApply(t *testing.T) {
	t.Parallel()
	b := keysSetup(t)
	const rounds, readers = 300, 4
	var c stressCounters
	c.created.Store(-1)
	c.revoking.Store(-1)
	c.revoked.Store(-1)
	c.tenants.Store(-1)
	c.now.Store(int64(b.now))
	done := make(chan struct{})
	errs := make(chan error, readers)
	var wg sync.WaitGroup
	for range readers {
		wg.Go(func() { errs <- readUntil(b.f, &c, done) })
	}
	applyRounds(t, b, &c, rounds)
	close(done)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	mustPublished(t, b.f)
}

// applyRounds creates, uses and revokes one key per round, in separate
// entries, and a tenant every tenth round; each command at a later time.
func applyRounds(t *testing.T, b *testBundle, c *stressCounters, rounds int64) {
	t.Helper()
	hash := make([]byte, 32)
	for i := range rounds {
		if i%10 == 0 {
			b.now++
			b.must(t, &pb.Command{NowSecs: b.now, Op: &pb.Command_CreateTenant{CreateTenant: &pb.CreateTenant{Name: stressTenantID(i / 10)}}})
			c.tenants.Store(i / 10)
		}
		rand.Read(hash)
		b.now++
		b.must(t, &pb.Command{NowSecs: b.now, Op: &pb.Command_CreateKey{CreateKey: &pb.CreateKey{KeyId: stressKeyID(i), SecretHash: hash, KeyTenant: stressTenantID(i / 10), Role: RoleProducer}}})
		c.created.Store(i)
		b.now++
		b.must(t, &pb.Command{NowSecs: b.now, Tenant: stressTenantID(i / 10), Principal: stressKeyID(i), Op: enqueueCmd("", "t"+strconv.FormatInt(i, 10)).Op})
		b.now++
		c.revoking.Store(i)
		b.must(t, &pb.Command{NowSecs: b.now, Op: revokeCmd("ksys", stressKeyID(i)).Op})
		c.revoked.Store(i)
		c.now.Store(int64(b.now))
	}
}

// readUntil reads until done and returns the first inconsistency.
func readUntil(f *FSM, c *stressCounters, done <-chan struct{}) error {
	lastTime := uint64(0)
	for {
		select {
		case <-done:
			return nil
		default:
		}
		if err := readOnce(f, c, &lastTime); err != nil {
			return err
		}
	}
}

// readOnce checks one round of reads against the counters loaded before
// (what must be visible) and after (what may have changed meanwhile).
func readOnce(f *FSM, c *stressCounters, lastTime *uint64) error {
	revoked, created, tenants, now := c.revoked.Load(), c.created.Load(), c.tenants.Load(), c.now.Load()
	if revoked >= 0 {
		if _, ok := f.Key(stressKeyID(revoked)); ok {
			return fmt.Errorf("Key(%s) found after its revocation was applied", stressKeyID(revoked))
		}
	}
	if created >= 0 {
		k, ok := f.Key(stressKeyID(created))
		if !ok && c.revoking.Load() < created {
			return fmt.Errorf("Key(%s) not found: created, not revoked", stressKeyID(created))
		}
		if _, tok := f.Tenant(k.Tenant); ok && !tok {
			return fmt.Errorf("Key(%s) found, its tenant %s not", k.ID, k.Tenant)
		}
	}
	if tenants >= 0 {
		if _, ok := f.Tenant(stressTenantID(tenants)); !ok {
			return fmt.Errorf("Tenant(%s) not found after it was created", stressTenantID(tenants))
		}
	}
	lt := f.LastTime()
	if lt < uint64(now) || lt < *lastTime {
		return fmt.Errorf("LastTime() = %d, want ≥ %d (applied) and ≥ %d (read before)", lt, now, *lastTime)
	}
	*lastTime = lt
	return nil
}
