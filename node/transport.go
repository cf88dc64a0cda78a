package node

import (
	"cmp"
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// The raft stream layer: every raft connection (append, vote, snapshot
// install, timeout-now) is mutual TLS 1.3 with certificates issued by a CA
// that every member derives from the cluster secret, followed by one hello
// frame each way; raft reads nothing before both succeeded.
//
//	CA key   = ed25519 seed HKDF-SHA256(secret, info "termivar/v1 raft ca")
//	CA cert  = self-signed, fixed template (identical on every member)
//	leaf     = ephemeral ed25519 key per start, CN = node ID,
//	           URI SAN "termivar:incarnation:<hex>"
//	hello    = status byte (0 OK, 1 REFUSED), reason length byte, reason

// Defaults of the stream layer.
const (
	handshakeTimeout     = 5 * time.Second
	maxPendingHandshakes = 64
	maxReasonBytes       = 200
	rejectLogInterval    = time.Second
	raftCAInfo           = "termivar/v1 raft ca"
	incarnationPrefix    = "incarnation:"
	uriScheme            = "termivar"
)

const (
	helloOK      byte = 0
	helloRefused byte = 1
)

// streamConfig configures a tlsStreamLayer.
type streamConfig struct {
	// Secret is the cluster secret the CA is derived from.
	Secret []byte
	// NodeID goes into the leaf certificate's CommonName.
	NodeID string
	// Incarnation is an opaque byte string carried (hex) in the leaf's URI
	// SAN; may be empty.
	Incarnation []byte
	// VerifyPeerFunc, when set, decides whether an authenticated peer may
	// talk raft; its error refuses the connection and is sent to the peer
	// as the reason. Nil accepts every holder of the cluster credential.
	VerifyPeerFunc func(peerNodeID string, peerIncarnation []byte) error
	// OnRefusedFunc, when set, is called with the reason when a peer
	// refused us in its hello frame.
	OnRefusedFunc func(reason string)
	// Logger receives rate-limited rejection reports (nil discards).
	Logger *slog.Logger
	// HandshakeTimeout bounds TLS plus hello (default 5 s).
	HandshakeTimeout time.Duration
	// MaxPending bounds concurrent inbound handshakes; a connection beyond
	// it is closed at once (default 64).
	MaxPending int
}

// peerIdentity is what a verified peer certificate says.
type peerIdentity struct {
	NodeID      string
	Incarnation []byte
}

// tlsStreamLayer is a raft.StreamLayer over a TCP listener. Accept returns
// only connections whose handshake succeeded; handshakes run in their own
// goroutines (at most MaxPending at once, each under HandshakeTimeout), so
// a silent or hostile peer never blocks raft's accept loop. Close closes
// the listener and every connection it accepted or dialed.
type tlsStreamLayer struct {
	ln       net.Listener
	cfg      streamConfig
	server   *tls.Config
	client   *tls.Config
	ready    chan net.Conn
	done     chan struct{}
	pending  chan struct{} // semaphore of inbound handshakes
	wg       sync.WaitGroup
	rejected atomic.Uint64

	mu      sync.Mutex
	conns   map[net.Conn]struct{}  // raw TCP conns, open until closed
	peers   map[*authConn]struct{} // authenticated conns, open until closed (nil after Close)
	closed  bool
	lastLog time.Time
	dropped int // rejections not logged since lastLog
}

// newStreamLayer derives the cluster CA, issues this start's leaf
// certificate and starts accepting on ln. It takes ownership of ln.
func newStreamLayer(ln net.Listener, cfg streamConfig) (*tlsStreamLayer, error) {
	cfg.HandshakeTimeout = cmp.Or(max(cfg.HandshakeTimeout, 0), handshakeTimeout)
	cfg.MaxPending = cmp.Or(max(cfg.MaxPending, 0), maxPendingHandshakes)
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	ca, caKey, err := deriveCA(cfg.Secret)
	if err != nil {
		return nil, err
	}
	leaf, err := issueLeaf(ca, caKey, cfg.NodeID, cfg.Incarnation)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	s := &tlsStreamLayer{
		ln: ln, cfg: cfg,
		ready:   make(chan net.Conn),
		done:    make(chan struct{}),
		pending: make(chan struct{}, cfg.MaxPending),
		conns:   map[net.Conn]struct{}{},
		peers:   map[*authConn]struct{}{},
	}
	s.server = &tls.Config{
		MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{leaf},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool,
		// NB: no resumption: every connection presents and verifies a
		// certificate and passes VerifyPeerFunc again.
		SessionTicketsDisabled: true,
	}
	s.client = &tls.Config{
		MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{leaf},
		// NB: peers are named by node ID, not host name, so the chain is
		// checked against the derived CA in VerifyConnection instead.
		InsecureSkipVerify: true,
		VerifyConnection:   func(cs tls.ConnectionState) error { return verifyChain(cs, pool) },
	}
	s.wg.Go(s.acceptLoop)
	return s, nil
}

// deriveCA returns the cluster CA: the same certificate and key on every
// holder of secret.
func deriveCA(secret []byte) (*x509.Certificate, ed25519.PrivateKey, error) {
	if len(secret) == 0 {
		return nil, nil, errors.New("node: raft transport needs the cluster secret")
	}
	seed, err := hkdf.Key(sha256.New, secret, nil, raftCAInfo, ed25519.SeedSize)
	if err != nil {
		return nil, nil, err
	}
	key := ed25519.NewKeyFromSeed(seed)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "termivar raft CA"},
		NotBefore:             time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC),
		NotAfter:              time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign,
		SubjectKeyId:          []byte(raftCAInfo), // fixed, so the certificate is identical everywhere
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, err
	}
	ca, err := x509.ParseCertificate(der)
	return ca, key, err
}

// issueLeaf creates an ephemeral key and a certificate for it signed by
// the CA, naming nodeID and the incarnation.
func issueLeaf(ca *x509.Certificate, caKey ed25519.PrivateKey, nodeID string, incarnation []byte) (tls.Certificate, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return tls.Certificate{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: nodeID},
		URIs:         []*url.URL{{Scheme: uriScheme, Opaque: incarnationPrefix + hex.EncodeToString(incarnation)}},
		// NB: a day of tolerance for clocks that disagree between members.
		NotBefore:   now.Add(-24 * time.Hour),
		NotAfter:    now.Add(100 * 365 * 24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, pub, caKey)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: priv}, nil
}

// verifyChain checks the server's certificate against the derived CA.
func verifyChain(cs tls.ConnectionState, pool *x509.CertPool) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("node: the raft peer sent no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{
		Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	return err
}

// identityOf reads the node ID and incarnation of a verified peer.
func identityOf(cs tls.ConnectionState) (peerIdentity, error) {
	if len(cs.PeerCertificates) == 0 {
		return peerIdentity{}, errors.New("node: the raft peer sent no certificate")
	}
	leaf := cs.PeerCertificates[0]
	id := peerIdentity{NodeID: leaf.Subject.CommonName}
	for _, u := range leaf.URIs {
		if u.Scheme == uriScheme && strings.HasPrefix(u.Opaque, incarnationPrefix) {
			b, err := hex.DecodeString(strings.TrimPrefix(u.Opaque, incarnationPrefix))
			if err != nil {
				return peerIdentity{}, errors.New("node: the raft peer's incarnation is not hex")
			}
			id.Incarnation = b
			return id, nil
		}
	}
	return peerIdentity{}, errors.New("node: the raft peer's certificate carries no incarnation")
}

// acceptLoop accepts raw connections and hands each to its own handshake.
func (s *tlsStreamLayer) acceptLoop() {
	var delay time.Duration
	for {
		raw, err := s.ln.Accept()
		if err != nil {
			if s.isClosed() {
				return
			}
			// NB: transient accept errors (EMFILE) back off like raft does.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			select {
			case <-s.done:
				return
			case <-time.After(delay):
			}
			continue
		}
		delay = 0
		if !s.track(raw) {
			return
		}
		select {
		case s.pending <- struct{}{}:
		default:
			s.reject(raw.RemoteAddr(), errors.New("too many pending raft handshakes"))
			s.closeRaw(raw)
			continue
		}
		s.wg.Go(func() { s.serveHandshake(raw) })
	}
}

// serveHandshake authenticates one inbound connection and offers it to
// Accept.
func (s *tlsStreamLayer) serveHandshake(raw net.Conn) {
	_, c, err := s.handshakeIdentity(raw, true, s.cfg.HandshakeTimeout)
	<-s.pending
	if err != nil {
		s.reject(raw.RemoteAddr(), err)
		s.closeRaw(raw)
		return
	}
	select {
	case s.ready <- c:
	case <-s.done:
		c.Close()
	}
}

// handshakeIdentity runs TLS and the hello exchange on raw under the
// timeout and returns the peer's identity and the authenticated conn.
func (s *tlsStreamLayer) handshakeIdentity(raw net.Conn, inbound bool, timeout time.Duration) (peerIdentity, *authConn, error) {
	if err := raw.SetDeadline(time.Now().Add(timeout)); err != nil {
		return peerIdentity{}, nil, err
	}
	var tc *tls.Conn
	if inbound {
		tc = tls.Server(raw, s.server)
	} else {
		tc = tls.Client(raw, s.client)
	}
	if err := tc.Handshake(); err != nil {
		return peerIdentity{}, nil, handshakeErr(err)
	}
	id, err := identityOf(tc.ConnectionState())
	verdict := err
	if verdict == nil && s.cfg.VerifyPeerFunc != nil {
		verdict = s.cfg.VerifyPeerFunc(id.NodeID, id.Incarnation)
	}
	if err := writeHello(tc, verdict); err != nil {
		return id, nil, handshakeErr(err)
	}
	reason, refused, err := readHello(tc)
	switch {
	case err != nil:
		// NB: a TLS 1.3 client learns that the server rejected its
		// certificate only here, from the server's alert.
		return id, nil, handshakeErr(err)
	case verdict != nil:
		return id, nil, &refusedError{by: "us", reason: verdict.Error()}
	case refused:
		if s.cfg.OnRefusedFunc != nil {
			s.cfg.OnRefusedFunc(reason)
		}
		return id, nil, &refusedError{by: "peer", reason: reason}
	}
	if err := raw.SetDeadline(time.Time{}); err != nil {
		return id, nil, err
	}
	c := &authConn{Conn: tc, raw: raw, s: s, id: id}
	s.mu.Lock()
	if s.peers != nil {
		s.peers[c] = struct{}{}
	}
	s.mu.Unlock()
	return id, c, nil
}

// errNoCredential marks a TLS or hello failure: the peer does not hold the
// cluster credential (or is not a raft peer of this cluster at all).
var errNoCredential = errors.New("raft handshake failed")

// handshakeErr marks err as errNoCredential unless the peer merely did not
// answer in time (a paused or overloaded member).
func handshakeErr(err error) error {
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		return fmt.Errorf("raft handshake timed out: %w", err)
	}
	return fmt.Errorf("%w: %w", errNoCredential, err)
}

// refusedError is a hello refusal, by us (VerifyPeerFunc) or by the peer.
type refusedError struct{ by, reason string }

func (e *refusedError) Error() string {
	if e.by == "peer" {
		return "node: the raft peer refused us: " + e.reason
	}
	return "node: refused the raft peer: " + e.reason
}

func writeHello(w io.Writer, verdict error) error {
	if verdict == nil {
		_, err := w.Write([]byte{helloOK, 0})
		return err
	}
	reason := verdict.Error()
	if len(reason) > maxReasonBytes {
		reason = reason[:maxReasonBytes]
	}
	_, err := w.Write(append([]byte{helloRefused, byte(len(reason))}, reason...))
	return err
}

func readHello(r io.Reader) (reason string, refused bool, err error) {
	var hdr [2]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return "", false, err
	}
	switch {
	case hdr[0] == helloOK && hdr[1] == 0:
		return "", false, nil
	case hdr[0] == helloRefused && int(hdr[1]) <= maxReasonBytes:
		b := make([]byte, hdr[1])
		if _, err := io.ReadFull(r, b); err != nil {
			return "", false, err
		}
		return string(b), true, nil
	}
	return "", false, errors.New("malformed hello frame")
}

// authConn is an authenticated connection; Close stops tracking it.
type authConn struct {
	*tls.Conn
	raw  net.Conn
	s    *tlsStreamLayer
	id   peerIdentity // as verified at the handshake
	once sync.Once
}

func (c *authConn) Close() error {
	c.once.Do(func() {
		c.s.untrack(c.raw)
		c.s.mu.Lock()
		delete(c.s.peers, c)
		c.s.mu.Unlock()
	})
	return c.Conn.Close()
}

// reverify runs VerifyPeerFunc again over every open authenticated
// connection and closes those it now refuses, counting each as a
// rejection; it returns how many it closed. A member verifies a peer
// against its applied node table, which may lag the log (a new leader
// that has not applied the entries of the last term yet): a peer it
// accepted then — a member whose data dir was replaced — must not keep
// its connection once the record is applied (the cluster's raft ports
// never serve a replaced data dir; wiped_test.go).
func (s *tlsStreamLayer) reverify() int {
	if s.cfg.VerifyPeerFunc == nil {
		return 0
	}
	s.mu.Lock()
	conns := make([]*authConn, 0, len(s.peers))
	for c := range s.peers {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	closed := 0
	for _, c := range conns {
		if err := s.cfg.VerifyPeerFunc(c.id.NodeID, c.id.Incarnation); err != nil {
			s.reject(c.raw.RemoteAddr(), fmt.Errorf("refused after the handshake: %w", err))
			c.Close()
			closed++
		}
	}
	return closed
}

// Accept returns the next authenticated inbound connection.
func (s *tlsStreamLayer) Accept() (net.Conn, error) {
	select {
	case c := <-s.ready:
		return c, nil
	case <-s.done:
		return nil, net.ErrClosed
	}
}

// Addr is the listener's address.
func (s *tlsStreamLayer) Addr() net.Addr { return s.ln.Addr() }

// Dial connects to a raft peer and authenticates both ends.
func (s *tlsStreamLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	_, c, err := s.dial(string(addr), timeout)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// dial connects to addr and returns the peer's verified identity. A
// failed handshake is counted and logged like a rejected inbound one.
func (s *tlsStreamLayer) dial(addr string, timeout time.Duration) (peerIdentity, *authConn, error) {
	raw, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return peerIdentity{}, nil, err
	}
	if !s.track(raw) {
		return peerIdentity{}, nil, net.ErrClosed
	}
	id, c, err := s.handshakeIdentity(raw, false, min(timeout, s.cfg.HandshakeTimeout))
	if err != nil {
		s.reject(raw.RemoteAddr(), err)
		s.closeRaw(raw)
		return id, nil, err
	}
	return id, c, nil
}

// Close stops accepting, closes every connection and waits for the
// handshake goroutines.
func (s *tlsStreamLayer) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	conns := s.conns
	s.conns, s.peers = nil, nil
	close(s.done)
	s.mu.Unlock()
	err := s.ln.Close()
	for c := range conns {
		c.Close()
	}
	s.wg.Wait()
	return err
}

func (s *tlsStreamLayer) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// track registers a raw conn so that Close closes it; after Close it
// closes raw and reports false.
func (s *tlsStreamLayer) track(raw net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		raw.Close()
		return false
	}
	s.conns[raw] = struct{}{}
	return true
}

func (s *tlsStreamLayer) untrack(raw net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, raw)
}

func (s *tlsStreamLayer) closeRaw(raw net.Conn) {
	s.untrack(raw)
	raw.Close()
}

// Rejected counts connections refused or failed at the handshake, inbound
// and outbound.
func (s *tlsStreamLayer) Rejected() uint64 { return s.rejected.Load() }

// reject counts a failed handshake and logs it at most once a second
// (with the number of reports suppressed since). Messages name the remote
// address and the TLS or hello error, never key material.
func (s *tlsStreamLayer) reject(remote net.Addr, err error) {
	s.mu.Lock()
	if s.closed {
		// NB: handshakes cut short by Close are not rejections.
		s.mu.Unlock()
		return
	}
	s.rejected.Add(1)
	now := time.Now()
	if now.Sub(s.lastLog) < rejectLogInterval {
		s.dropped++
		s.mu.Unlock()
		return
	}
	suppressed := s.dropped
	s.lastLog, s.dropped = now, 0
	s.mu.Unlock()
	s.cfg.Logger.Warn("rejected a raft connection", "remote", remote.String(), "error", err, "suppressed", suppressed)
}
