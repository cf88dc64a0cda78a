package raftfsm

// Error is a failure of the FSM's own rules (tenants, keys, worker
// ownership, command decoding). Core failures are *distributed.Error.
type Error struct {
	Kind   ErrorKind
	Reason string
}

// ErrorKind classifies FSM failures.
type ErrorKind uint8

// FSM error kinds.
const (
	// KindInvalidCommand: the log entry does not decode, has an unknown
	// version or operation, or a field is out of range.
	KindInvalidCommand ErrorKind = iota + 1
	// KindUnknownTenant: the command names a tenant that does not exist.
	KindUnknownTenant
	// KindTenantExists: CreateTenant for an existing name.
	KindTenantExists
	// KindKeyExists: CreateKey for an existing key ID.
	KindKeyExists
	// KindPermissionDenied: the principal may not act for this worker.
	KindPermissionDenied
	// KindAlreadyInitialized: InitCluster on an initialised cluster.
	KindAlreadyInitialized
	// KindKeyNotFound: RevokeKey or RotateKey names no live key the
	// principal may see (unknown, revoked, or of another tenant).
	KindKeyNotFound
	// KindLastAdminKey: RevokeKey of the only live admin key of the
	// system tenant (the cluster would have no administrator left).
	KindLastAdminKey
	// KindKeyLimit: the key table (live and revoked records) holds
	// MaxKeyRecords.
	KindKeyLimit
	// KindScanNotFound: DeleteScan (PurgeTasks whole_scan) names a scan
	// with no task records (never enqueued, or already deleted).
	KindScanNotFound
	// KindClusterVersion: the operation belongs to a cluster version the
	// cluster has not reached (a member still runs an older binary), or
	// SetClusterVersion names a version a member does not support.
	KindClusterVersion
	kindEnd
)

// AllErrorKinds returns every FSM kind in declaration order (the server's
// error registry must name each).
func AllErrorKinds() []ErrorKind {
	out := make([]ErrorKind, 0, int(kindEnd)-1)
	for k := ErrorKind(1); k < kindEnd; k++ {
		out = append(out, k)
	}
	return out
}

// kindNames are the kinds' wire names, indexed by kind.
var kindNames = [kindEnd]string{
	KindInvalidCommand: "invalid_command", KindUnknownTenant: "unknown_tenant", KindTenantExists: "tenant_exists",
	KindKeyExists: "key_exists", KindPermissionDenied: "permission_denied", KindAlreadyInitialized: "already_initialized",
	KindKeyNotFound: "key_not_found", KindLastAdminKey: "last_admin_key", KindKeyLimit: "key_limit",
	KindScanNotFound: "scan_not_found", KindClusterVersion: "cluster_version",
}

// String returns the snake_case kind name used on the wire.
func (k ErrorKind) String() string {
	if k == 0 || k >= kindEnd {
		return "unknown"
	}
	return kindNames[k]
}

// Error implements error.
func (e *Error) Error() string {
	if e.Reason == "" {
		return "raftfsm: " + e.Kind.String()
	}
	return "raftfsm: " + e.Kind.String() + ": " + e.Reason
}

// Is matches another *Error of the same kind.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Kind == e.Kind
}

// Sentinels for errors.Is.
var (
	ErrInvalidCommand     = &Error{Kind: KindInvalidCommand}
	ErrUnknownTenant      = &Error{Kind: KindUnknownTenant}
	ErrTenantExists       = &Error{Kind: KindTenantExists}
	ErrKeyExists          = &Error{Kind: KindKeyExists}
	ErrPermissionDenied   = &Error{Kind: KindPermissionDenied}
	ErrAlreadyInitialized = &Error{Kind: KindAlreadyInitialized}
	ErrKeyNotFound        = &Error{Kind: KindKeyNotFound}
	ErrLastAdminKey       = &Error{Kind: KindLastAdminKey}
	ErrKeyLimit           = &Error{Kind: KindKeyLimit}
	ErrScanNotFound       = &Error{Kind: KindScanNotFound}
	ErrClusterVersion     = &Error{Kind: KindClusterVersion}
)

func fsmErr(k ErrorKind, reason string) *Error { return &Error{Kind: k, Reason: reason} }
