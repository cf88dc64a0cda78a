// Package apikey generates and verifies the node's bearer API keys and holds
// the role → method permission table.
//
// A key reads "tvk_<key id>_<secret>": the key ID (16 hex digits) names the
// key in logs and in the replicated key table; the secret (32 random bytes,
// base64url) never leaves the client after creation. The node stores only
// SHA-256(secret) with the key ID, tenant and role, and compares hashes in
// constant time.
package apikey

import (
	"cmp"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"io"
	"strings"
)

// Prefix starts every key.
const Prefix = "tvk_"

const (
	idBytes     = 8
	secretBytes = 32
)

// MaxKeyBytes bounds a presented key; longer input is rejected unread.
const MaxKeyBytes = 128

// ErrMalformed is returned by Parse for anything that is not a key.
var ErrMalformed = errors.New("apikey: malformed key")

// Role is what a key may do inside its tenant.
type Role uint8

// Roles. The zero value is invalid.
const (
	RoleAdmin Role = iota + 1
	RoleProducer
	RoleWorker
)

// String returns "admin", "producer" or "worker".
func (r Role) String() string {
	if r < RoleAdmin || r > RoleWorker {
		return "invalid"
	}
	return [...]string{RoleAdmin: "admin", RoleProducer: "producer", RoleWorker: "worker"}[r]
}

// AllRoles lists every role.
func AllRoles() []Role { return []Role{RoleAdmin, RoleProducer, RoleWorker} }

// ParseRole maps a String form back to the role.
func ParseRole(s string) (Role, bool) {
	for _, r := range AllRoles() {
		if r.String() == s {
			return r, true
		}
	}
	return 0, false
}

// Generated is a new key: Key is shown to the user once; ID and Hash are
// what the node stores.
type Generated struct {
	Key  string
	ID   string
	Hash [sha256.Size]byte
}

// Generate makes a key from rnd (crypto/rand.Reader when nil).
func Generate(rnd io.Reader) (Generated, error) {
	rnd = cmp.Or(rnd, rand.Reader)
	var buf [idBytes + secretBytes]byte
	if _, err := io.ReadFull(rnd, buf[:]); err != nil {
		return Generated{}, err
	}
	id := hex.EncodeToString(buf[:idBytes])
	secret := base64.RawURLEncoding.EncodeToString(buf[idBytes:])
	return Generated{
		Key:  Prefix + id + "_" + secret,
		ID:   id,
		Hash: sha256.Sum256([]byte(secret)),
	}, nil
}

// Parse splits a presented key into its ID and secret. It checks the shape
// only; Verify checks the secret.
func Parse(key string) (id, secret string, err error) {
	if len(key) > MaxKeyBytes || !strings.HasPrefix(key, Prefix) {
		return "", "", ErrMalformed
	}
	rest := key[len(Prefix):]
	if len(rest) < 2*idBytes+1 || rest[2*idBytes] != '_' {
		return "", "", ErrMalformed
	}
	id, secret = rest[:2*idBytes], rest[2*idBytes+1:]
	if _, err := hex.DecodeString(id); err != nil || strings.ToLower(id) != id {
		return "", "", ErrMalformed
	}
	if len(secret) == 0 {
		return "", "", ErrMalformed
	}
	return id, secret, nil
}

// ValidID reports whether id has the shape of a key ID.
func ValidID(id string) bool {
	if len(id) != 2*idBytes || strings.ToLower(id) != id {
		return false
	}
	_, err := hex.DecodeString(id)
	return err == nil
}

// Verify reports, in constant time with respect to the secret, whether
// secret hashes to storedHash.
func Verify(storedHash []byte, secret string) bool {
	sum := sha256.Sum256([]byte(secret))
	return len(storedHash) == sha256.Size && subtle.ConstantTimeCompare(storedHash, sum[:]) == 1
}

// Allowed reports whether role may call method of service (the short
// protobuf names, e.g. "Worker", "Acquire"). Admin may call everything in its
// tenant (Cluster membership calls also check for the system tenant);
// producers the Producer service; workers the Worker service; every
// role may read Admin.Status and the Dashboard service (read-only) of its
// own tenant.
func Allowed(role Role, service, method string) bool {
	if service == "Dashboard" {
		return role == RoleAdmin || role == RoleProducer || role == RoleWorker
	}
	switch role {
	case RoleAdmin:
		return service == "Worker" || service == "Producer" || service == "Admin" || service == "Cluster"
	case RoleProducer:
		return service == "Producer" || (service == "Admin" && method == "Status")
	case RoleWorker:
		return service == "Worker" || (service == "Admin" && method == "Status")
	}
	return false
}
