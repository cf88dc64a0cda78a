package raftfsm

import (
	"maps"
	"slices"
	"sync/atomic"
)

// This file holds the tables every API call reads — the live key table
// (authentication) and the tenant map (the tenant check, TenantView) —
// published for readers that must not wait for Apply. Apply holds f.mu
// for a whole log entry; a call that took f.mu's read lock to look up its
// key waited for that entry, however little it had to do with the key.
//
// Invariants (checked by checkPublished in tests):
//   - P1: f.pubKeys and f.pubTenants hold what f.keys and f.tenants held
//     at the end of the last applied entry (or restore); a published
//     generation is never written after it is stored.
//   - P2: they and f.lastTimePub are stored before Apply records the
//     entry's index as applied (markApplied), so a read that follows a
//     command's answer, or a read barrier at or past its index, sees the
//     command's effect: a key is refused from the moment its revocation
//     is applied, as before (docs/node.md "Revoking and rotating keys").

// cowShards is the number of shards of a cowTable: a change copies one
// shard, 1/256 of the table (256 records of a full key table, which
// MaxKeyRecords bounds), and the array of shard pointers (2 KiB).
const cowShards = 256

// cowTable is a copy-on-write map published to lock-free readers: get
// reads the published generation; set and del (the apply goroutine only,
// under f.mu) change the next one, copying each shard they touch once per
// generation; publish stores it.
type cowTable[V any] struct {
	pub    atomic.Pointer[[cowShards]map[string]V]
	next   *[cowShards]map[string]V // the next generation, nil while unchanged
	copied [cowShards]bool          // shards of next copied from pub
}

// shardOf is FNV-1a of k, reduced to a shard index.
func shardOf(k string) int {
	h := uint32(2166136261)
	for i := 0; i < len(k); i++ {
		h = (h ^ uint32(k[i])) * 16777619
	}
	return int(h % cowShards)
}

// reset publishes a generation holding m's entries (New, RestoreState).
func (c *cowTable[V]) reset(m map[string]V) {
	var g [cowShards]map[string]V
	for i := range g {
		g[i] = map[string]V{}
	}
	for k, v := range m {
		g[shardOf(k)][k] = v
	}
	c.pub.Store(&g)
	c.next = nil
}

// get reads k from the published generation.
func (c *cowTable[V]) get(k string) (V, bool) {
	v, ok := c.pub.Load()[shardOf(k)][k]
	return v, ok
}

// writable returns k's shard of the next generation, copied once.
func (c *cowTable[V]) writable(k string) map[string]V {
	if c.next == nil {
		g := *c.pub.Load()
		c.next, c.copied = &g, [cowShards]bool{}
	}
	i := shardOf(k)
	if !c.copied[i] {
		c.next[i], c.copied[i] = maps.Clone(c.next[i]), true
	}
	return c.next[i]
}

func (c *cowTable[V]) set(k string, v V) { c.writable(k)[k] = v }
func (c *cowTable[V]) del(k string)      { delete(c.writable(k), k) }

// publish stores the next generation, if anything changed.
func (c *cowTable[V]) publish() {
	if c.next != nil {
		c.pub.Store(c.next)
		c.next = nil
	}
}

// len counts the published entries.
func (c *cowTable[V]) len() int {
	n := 0
	for _, s := range c.pub.Load() {
		n += len(s)
	}
	return n
}

// sortedKeys returns the published keys, sorted.
func (c *cowTable[V]) sortedKeys() []string {
	var out []string
	for _, s := range c.pub.Load() {
		for k := range s {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// putKey stores a live key record (caller holds f.mu, inside Apply).
func (f *FSM) putKey(k KeyRecord) {
	f.keys[k.ID] = k
	f.pubKeys.set(k.ID, k)
}

// dropKey removes a live key record (caller holds f.mu, inside Apply).
func (f *FSM) dropKey(id string) {
	delete(f.keys, id)
	f.pubKeys.del(id)
}

// putTenant adds a tenant (caller holds f.mu, inside Apply).
func (f *FSM) putTenant(t *Tenant) {
	f.tenants[t.name] = t
	f.pubTenants.set(t.name, t)
}

// publish makes the end of an applied entry visible to the lock-free
// reads (P1, P2). Caller holds f.mu.
func (f *FSM) publish() {
	f.lastTimePub.Store(f.lastTime)
	f.pubTenants.publish() // NB: before the keys, so a key's tenant is never missing
	f.pubKeys.publish()
}

// publishAll publishes maps replaced whole (New, RestoreState); caller
// holds f.mu or owns f.
func (f *FSM) publishAll() {
	f.lastTimePub.Store(f.lastTime)
	f.pubTenants.reset(f.tenants)
	f.pubKeys.reset(f.keys)
}
