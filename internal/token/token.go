// Package token seals the core's ownership proofs (leases, queued fences,
// completion receipts) into opaque tokens that clients hold, and opens them
// again. A token binds the proof to a tenant and to the cluster's epoch ID and
// is authenticated with HMAC-SHA256 under the cluster secret, which closes the
// cross-instance replay the core alone cannot detect (contract Part C).
//
// Wire form (all lengths are uvarints):
//
//	version(1) | len(tenant) tenant | epoch(16) | kind(1) | len(proof) proof | HMAC-SHA256(32)
//
// The MAC covers every byte before it. Open checks, in order: framing, MAC
// (constant time), tenant, epoch, kind, then the proof's own strict decoding.
// Every failure is an *Error matching ErrInvalidToken; the API maps it to
// PermissionDenied. Errors never echo token bytes.
package token

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"hash"
	"sync"

	distributed "github.com/termivar/distributed"
)

// Version is the only token encoding version this package reads or writes.
const Version = 1

// EpochBytes is the length of a cluster epoch ID.
const EpochBytes = 16

// MinSecretBytes is the shortest accepted cluster secret.
const MinSecretBytes = 32

// MaxTokenBytes bounds a token; anything longer is rejected before any work.
// A lease with two 256-byte identifiers and a 256-byte tenant fits easily.
const MaxTokenBytes = 2048

// Kind says which proof a token carries.
type Kind uint8

// Token kinds. The zero value is invalid.
const (
	KindLease Kind = iota + 1
	KindFence
	KindReceipt
)

// String returns "lease", "fence" or "receipt".
func (k Kind) String() string {
	if k < KindLease || k > KindReceipt {
		return "unknown"
	}
	return [...]string{KindLease: "lease", KindFence: "fence", KindReceipt: "receipt"}[k]
}

// ErrInvalidToken is matched (errors.Is) by every error Open returns.
var ErrInvalidToken = errors.New("token: invalid token")

// Error says why a token was rejected. Reason is one of a fixed set of
// constant strings; it never contains token bytes.
type Error struct {
	Reason string
}

// Error implements error.
func (e *Error) Error() string { return "token: invalid token: " + e.Reason }

// Is makes errors.Is(err, ErrInvalidToken) true.
func (e *Error) Is(target error) bool { return target == ErrInvalidToken }

// Rejection reasons.
const (
	ReasonMalformed    = "malformed"
	ReasonMAC          = "authentication failed"
	ReasonWrongTenant  = "issued for another tenant"
	ReasonWrongCluster = "issued by another cluster"
	ReasonWrongKind    = "wrong token kind"
	ReasonInvalidProof = "proof is invalid"
	reasonVersion      = "unknown version"
	reasonTooLarge     = "too large"
)

func fail(reason string) error { return &Error{Reason: reason} }

// Codec seals and opens tokens for one cluster. It is immutable and safe for
// concurrent use.
type Codec struct {
	epoch [EpochBytes]byte
	pool  sync.Pool // of hash.Hash (HMAC-SHA256 under the secret)
}

// NewCodec returns a codec for the cluster with this secret and epoch ID.
// The secret must be at least MinSecretBytes long and the epoch exactly
// EpochBytes.
func NewCodec(secret, epoch []byte) (*Codec, error) {
	if len(secret) < MinSecretBytes {
		return nil, errors.New("token: cluster secret is too short")
	}
	if len(epoch) != EpochBytes {
		return nil, errors.New("token: epoch ID must be 16 bytes")
	}
	key := append([]byte(nil), secret...)
	c := &Codec{}
	copy(c.epoch[:], epoch)
	c.pool.New = func() any { return hmac.New(sha256.New, key) }
	return c, nil
}

func (c *Codec) mac(msg []byte) []byte {
	h := c.pool.Get().(hash.Hash)
	h.Reset()
	h.Write(msg)
	sum := h.Sum(nil)
	c.pool.Put(h)
	return sum
}

// Seal wraps proof bytes of the given kind for tenant. It never fails; a
// caller passing an invalid kind is a programmer error and panics.
func (c *Codec) Seal(tenant string, kind Kind, proof []byte) []byte {
	if kind < KindLease || kind > KindReceipt {
		panic("token: seal with invalid kind")
	}
	buf := make([]byte, 0, 1+binary.MaxVarintLen64*2+len(tenant)+EpochBytes+1+len(proof)+sha256.Size)
	buf = append(buf, Version)
	buf = binary.AppendUvarint(buf, uint64(len(tenant)))
	buf = append(buf, tenant...)
	buf = append(buf, c.epoch[:]...)
	buf = append(buf, byte(kind))
	buf = binary.AppendUvarint(buf, uint64(len(proof)))
	buf = append(buf, proof...)
	return append(buf, c.mac(buf)...)
}

// SealLease seals a lease for tenant.
func (c *Codec) SealLease(tenant string, l distributed.TaskLease) []byte {
	b, _ := l.MarshalBinary()
	return c.Seal(tenant, KindLease, b)
}

// SealFence seals a queued fence for tenant.
func (c *Codec) SealFence(tenant string, f distributed.QueuedTaskFence) []byte {
	b, _ := f.MarshalBinary()
	return c.Seal(tenant, KindFence, b)
}

// SealReceipt seals a completion receipt for tenant.
func (c *Codec) SealReceipt(tenant string, r distributed.CompletionReceipt) []byte {
	b, _ := r.MarshalBinary()
	return c.Seal(tenant, KindReceipt, b)
}

// Open verifies tok for tenant and returns its kind and proof bytes (a fresh
// copy). See the package doc for the order of checks.
func (c *Codec) Open(tenant string, tok []byte) (Kind, []byte, error) {
	if len(tok) > MaxTokenBytes {
		return 0, nil, fail(reasonTooLarge)
	}
	if len(tok) < 1+1+EpochBytes+1+1+sha256.Size {
		return 0, nil, fail(ReasonMalformed)
	}
	if tok[0] != Version {
		return 0, nil, fail(reasonVersion)
	}
	body, sum := tok[:len(tok)-sha256.Size], tok[len(tok)-sha256.Size:]
	if !hmac.Equal(c.mac(body), sum) {
		return 0, nil, fail(ReasonMAC)
	}
	rest := body[1:]
	tlen, n := binary.Uvarint(rest)
	if n <= 0 || tlen > uint64(len(rest)-n) {
		return 0, nil, fail(ReasonMalformed)
	}
	tokTenant := rest[n : n+int(tlen)]
	rest = rest[n+int(tlen):]
	if len(rest) < EpochBytes+1 {
		return 0, nil, fail(ReasonMalformed)
	}
	epoch, kind := rest[:EpochBytes], Kind(rest[EpochBytes])
	rest = rest[EpochBytes+1:]
	plen, n := binary.Uvarint(rest)
	if n <= 0 || plen != uint64(len(rest)-n) {
		return 0, nil, fail(ReasonMalformed)
	}
	proof := rest[n:]
	// NB: a token with a valid MAC was sealed by this cluster secret; the
	// remaining checks stop replay across tenants and across epochs of
	// clusters that share a secret.
	if !hmac.Equal(tokTenant, []byte(tenant)) {
		return 0, nil, fail(ReasonWrongTenant)
	}
	if !hmac.Equal(epoch, c.epoch[:]) {
		return 0, nil, fail(ReasonWrongCluster)
	}
	if kind < KindLease || kind > KindReceipt {
		return 0, nil, fail(ReasonMalformed)
	}
	return kind, append([]byte(nil), proof...), nil
}

func (c *Codec) openKind(tenant string, tok []byte, want Kind) ([]byte, error) {
	kind, proof, err := c.Open(tenant, tok)
	if err != nil {
		return nil, err
	}
	if kind != want {
		return nil, fail(ReasonWrongKind)
	}
	return proof, nil
}

// OpenLease verifies a lease token and decodes the lease.
func (c *Codec) OpenLease(tenant string, tok []byte) (distributed.TaskLease, error) {
	var l distributed.TaskLease
	proof, err := c.openKind(tenant, tok, KindLease)
	if err != nil {
		return l, err
	}
	if l.UnmarshalBinary(proof) != nil || l.IsZero() {
		return distributed.TaskLease{}, fail(ReasonInvalidProof)
	}
	return l, nil
}

// OpenFence verifies a fence token and decodes the fence.
func (c *Codec) OpenFence(tenant string, tok []byte) (distributed.QueuedTaskFence, error) {
	var f distributed.QueuedTaskFence
	proof, err := c.openKind(tenant, tok, KindFence)
	if err != nil {
		return f, err
	}
	if f.UnmarshalBinary(proof) != nil || f.IsZero() {
		return distributed.QueuedTaskFence{}, fail(ReasonInvalidProof)
	}
	return f, nil
}

// OpenReceipt verifies a receipt token and decodes the receipt.
func (c *Codec) OpenReceipt(tenant string, tok []byte) (distributed.CompletionReceipt, error) {
	var r distributed.CompletionReceipt
	proof, err := c.openKind(tenant, tok, KindReceipt)
	if err != nil {
		return r, err
	}
	if r.UnmarshalBinary(proof) != nil || r.IsZero() {
		return distributed.CompletionReceipt{}, fail(ReasonInvalidProof)
	}
	return r, nil
}

// OpenOwnership verifies a fence or lease token and returns the ownership it
// proves (what CancelTask takes).
func (c *Codec) OpenOwnership(tenant string, tok []byte) (distributed.TaskOwnership, error) {
	kind, proof, err := c.Open(tenant, tok)
	if err != nil {
		return distributed.TaskOwnership{}, err
	}
	switch kind {
	case KindLease:
		var l distributed.TaskLease
		if l.UnmarshalBinary(proof) != nil || l.IsZero() {
			return distributed.TaskOwnership{}, fail(ReasonInvalidProof)
		}
		return distributed.OwnershipFromLease(l), nil
	case KindFence:
		var f distributed.QueuedTaskFence
		if f.UnmarshalBinary(proof) != nil || f.IsZero() {
			return distributed.TaskOwnership{}, fail(ReasonInvalidProof)
		}
		return distributed.OwnershipFromFence(f), nil
	}
	return distributed.TaskOwnership{}, fail(ReasonWrongKind)
}
