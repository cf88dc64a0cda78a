package raftfsm

import (
	"slices"
	"strings"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// This file holds the key table's commands (CreateKey, RevokeKey,
// RotateKey), its reads and its snapshot form.
//
// Invariants of the key table (checked by RestoreState):
//   - K1: a key ID is live (f.keys) or revoked (f.revoked), never both, and
//     an ID is never reused: CreateKey and RotateKey refuse revoked IDs, so
//     no start-up path can bring a revoked key back.
//   - K2: live records carry a 32-byte hash, revoked records none.
//   - K3: live + revoked records ≤ MaxKeyRecords.
//   - K4: every worker binding (Tenant.owners) names a live worker key of
//     that tenant; revoking a key unbinds its workers, rotating moves them.

// MaxKeyRecords bounds the key table, live and revoked records together.
const MaxKeyRecords = 1 << 16

// maxKeyIDBytes bounds a key ID.
const maxKeyIDBytes = 64

// KeyInfo describes a key without its secret hash (what ListKeys shows).
type KeyInfo struct {
	ID, Tenant, Role         string
	CreatedSecs, RevokedSecs uint64 // RevokedSecs 0: live
}

func validKeyID(id string) bool {
	return id != "" && len(id) <= maxKeyIDBytes && distributed.ValidIdentifier(id)
}

func validRole(r string) bool { return r == RoleAdmin || r == RoleProducer || r == RoleWorker }

// checkNewKeyID checks that id may name a new key: valid, never used (K1),
// and room in the table (K3).
func (f *FSM) checkNewKeyID(id string) error {
	if !validKeyID(id) {
		return fsmErr(KindInvalidCommand, "key ID is invalid")
	}
	if _, ok := f.keys[id]; ok {
		return fsmErr(KindKeyExists, "")
	}
	if _, ok := f.revoked[id]; ok {
		return fsmErr(KindKeyExists, "key ID was revoked; IDs are never reused")
	}
	if len(f.keys)+len(f.revoked) >= MaxKeyRecords {
		return fsmErr(KindKeyLimit, "")
	}
	return nil
}

func (f *FSM) applyCreateKey(c *pb.CreateKey, now uint64) Response {
	switch {
	case len(c.GetSecretHash()) != 32:
		return Response{Err: fsmErr(KindInvalidCommand, "secret hash must be 32 bytes")}
	case !validRole(c.GetRole()):
		return Response{Err: fsmErr(KindInvalidCommand, "role is invalid")}
	}
	if !validKeyID(c.GetKeyId()) {
		return Response{Err: fsmErr(KindInvalidCommand, "key ID is invalid")}
	}
	if _, ok := f.tenants[c.GetKeyTenant()]; !ok {
		return Response{Err: fsmErr(KindUnknownTenant, "")}
	}
	if err := f.checkNewKeyID(c.GetKeyId()); err != nil {
		return Response{Err: err}
	}
	f.putKey(KeyRecord{ID: c.GetKeyId(), Hash: slices.Clone(c.GetSecretHash()), Tenant: c.GetKeyTenant(), Role: c.GetRole(), CreatedSecs: now})
	return Response{}
}

// keyForAdmin returns the live key id if principal may manage it: an admin
// key of the key's tenant or of the system tenant (the empty principal is
// the node). A key the principal may not see is KeyNotFound, like an
// unknown one, so tenant admins learn nothing about other tenants' IDs.
func (f *FSM) keyForAdmin(principal, id string) (KeyRecord, error) {
	system := principal == ""
	var p KeyRecord
	if !system {
		var ok bool
		if p, ok = f.keys[principal]; !ok {
			return KeyRecord{}, fsmErr(KindPermissionDenied, "unknown principal")
		}
		if p.Role != RoleAdmin {
			return KeyRecord{}, fsmErr(KindPermissionDenied, "operation needs an admin key")
		}
		system = p.Tenant == SystemTenant
	}
	k, ok := f.keys[id]
	if !ok || (!system && k.Tenant != p.Tenant) {
		reason := ""
		if r, gone := f.revoked[id]; gone && (system || r.Tenant == p.Tenant) {
			reason = "key is already revoked"
		}
		return KeyRecord{}, fsmErr(KindKeyNotFound, reason)
	}
	return k, nil
}

// lastSystemAdmin reports whether k is the only live admin key of the
// system tenant. O(keys); key commands are rare.
func (f *FSM) lastSystemAdmin(k KeyRecord) bool {
	if k.Tenant != SystemTenant || k.Role != RoleAdmin {
		return false
	}
	for id, o := range f.keys {
		if id != k.ID && o.Tenant == SystemTenant && o.Role == RoleAdmin {
			return false
		}
	}
	return true
}

// applyRevokeKey revokes a live key (no value). Checks first, then the
// writes: the key moves to the revoked table and its worker bindings go
// (K4), so the next apply on every node refuses it.
func (f *FSM) applyRevokeKey(principal string, c *pb.RevokeKey, now uint64) Response {
	k, err := f.keyForAdmin(principal, c.GetKeyId())
	if err != nil {
		return Response{Err: err}
	}
	if f.lastSystemAdmin(k) {
		return Response{Err: fsmErr(KindLastAdminKey, "the system tenant would have no admin key; rotate it instead")}
	}
	f.retire(k, now)
	f.rebind(k, "")
	return Response{}
}

// applyRotateKey replaces a live key by a new one with the same tenant and
// role, moves its worker bindings and revokes it, in one command (no
// value). Every check precedes the first write.
func (f *FSM) applyRotateKey(principal string, c *pb.RotateKey, now uint64) Response {
	k, err := f.keyForAdmin(principal, c.GetKeyId())
	if err != nil {
		return Response{Err: err}
	}
	if len(c.GetNewSecretHash()) != 32 {
		return Response{Err: fsmErr(KindInvalidCommand, "secret hash must be 32 bytes")}
	}
	if err := f.checkNewKeyID(c.GetNewKeyId()); err != nil {
		return Response{Err: err}
	}
	f.putKey(KeyRecord{ID: c.GetNewKeyId(), Hash: slices.Clone(c.GetNewSecretHash()), Tenant: k.Tenant, Role: k.Role, CreatedSecs: now})
	f.retire(k, now)
	f.rebind(k, c.GetNewKeyId())
	return Response{}
}

// retire moves k from the live to the revoked table (K1, K2).
func (f *FSM) retire(k KeyRecord, now uint64) {
	f.dropKey(k.ID)
	k.Hash, k.RevokedSecs = nil, now
	f.revoked[k.ID] = k
}

// rebind moves the worker bindings of k to newID, or drops them when newID
// is empty (K4). Only worker keys bind workers.
func (f *FSM) rebind(k KeyRecord, newID string) {
	t, ok := f.tenants[k.Tenant]
	if !ok || k.Role != RoleWorker {
		return
	}
	for w, id := range t.owners {
		switch {
		case id != k.ID:
		case newID == "":
			delete(t.owners, w)
		default:
			t.owners[w] = newID
		}
	}
}

// KeyKnown reports whether id names a live or a revoked key: an ID that
// CreateKey will never accept again.
func (f *FSM) KeyKnown(id string) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	_, live := f.keys[id]
	_, revoked := f.revoked[id]
	return live || revoked
}

// ListKeys returns the keys of tenant ("" for every tenant), revoked ones
// too when includeRevoked, sorted by tenant and ID. It never returns hashes.
func (f *FSM) ListKeys(tenant string, includeRevoked bool) []KeyInfo {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []KeyInfo
	add := func(m map[string]KeyRecord) {
		for _, k := range m {
			if tenant == "" || k.Tenant == tenant {
				out = append(out, KeyInfo{ID: k.ID, Tenant: k.Tenant, Role: k.Role, CreatedSecs: k.CreatedSecs, RevokedSecs: k.RevokedSecs})
			}
		}
	}
	add(f.keys)
	if includeRevoked {
		add(f.revoked)
	}
	slices.SortFunc(out, func(a, b KeyInfo) int {
		if c := strings.Compare(a.Tenant, b.Tenant); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out
}

// exportKeys returns the live and revoked records sorted by ID (caller
// holds the lock).
func (f *FSM) exportKeys() (live, revoked []*pb.KeyRecord) {
	conv := func(m map[string]KeyRecord) []*pb.KeyRecord {
		var out []*pb.KeyRecord
		for _, id := range sortedKeys(m) {
			k := m[id]
			out = append(out, &pb.KeyRecord{KeyId: k.ID, SecretHash: k.Hash, Tenant: k.Tenant, Role: k.Role, CreatedSecs: k.CreatedSecs, RevokedSecs: k.RevokedSecs})
		}
		return out
	}
	return conv(f.keys), conv(f.revoked)
}

// restoreKeys validates a snapshot's key tables (K1–K4) against its
// tenants.
func restoreKeys(st *pb.FSMState, tenants map[string]*Tenant) (live, revoked map[string]KeyRecord, ok bool) {
	if len(st.GetKeys())+len(st.GetRevokedKeys()) > MaxKeyRecords {
		return nil, nil, false
	}
	live, revoked = map[string]KeyRecord{}, map[string]KeyRecord{}
	read := func(in []*pb.KeyRecord, into map[string]KeyRecord, wantHash int) bool {
		for _, k := range in {
			_, dupLive := live[k.GetKeyId()]
			_, dupRevoked := revoked[k.GetKeyId()]
			_, tenantOK := tenants[k.GetTenant()]
			if dupLive || dupRevoked || !tenantOK || !validKeyID(k.GetKeyId()) || !validRole(k.GetRole()) || len(k.GetSecretHash()) != wantHash {
				return false
			}
			var hash []byte
			if wantHash > 0 {
				hash = slices.Clone(k.GetSecretHash())
			}
			into[k.GetKeyId()] = KeyRecord{ID: k.GetKeyId(), Hash: hash, Tenant: k.GetTenant(), Role: k.GetRole(),
				CreatedSecs: k.GetCreatedSecs(), RevokedSecs: k.GetRevokedSecs()}
		}
		return true
	}
	if !read(st.GetKeys(), live, 32) || !read(st.GetRevokedKeys(), revoked, 0) {
		return nil, nil, false
	}
	for _, t := range tenants {
		for _, id := range t.owners {
			if k, ok := live[id]; !ok || k.Tenant != t.name || k.Role != RoleWorker {
				return nil, nil, false
			}
		}
	}
	return live, revoked, true
}
