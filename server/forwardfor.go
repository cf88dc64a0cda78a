package server

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ForwardedForHeader carries the client's address on a request a follower
// forwards to the leader, as "IP UNIXSECS MAC": MAC is HMAC-SHA256 under a
// key derived from the cluster secret over the forwarding node's ID, the IP
// and the time. The leader uses the IP as the request's source (failure
// throttle and audit) only when the MAC verifies and the time is within
// forwardedForSkew; otherwise the connection's address counts. So failures
// forwarded by a follower are charged to their client, not to the follower
// (which would throttle every client behind it), and no client can choose
// the address it is charged to.
const ForwardedForHeader = "Termivar-Forwarded-For"

// forwardedForSkew bounds the age (and clock skew) of a forwarded source.
const forwardedForSkew = time.Minute

func (s *Server) forwardedForKey() []byte {
	m := hmac.New(sha256.New, s.node.Secret())
	m.Write([]byte("termivar forwarded-for v1"))
	return m.Sum(nil)
}

func (s *Server) forwardedForMAC(nodeID, ip string, unix int64) string {
	m := hmac.New(sha256.New, s.forwardedForKey())
	m.Write([]byte(nodeID + "\n" + ip + "\n" + strconv.FormatInt(unix, 10)))
	return hex.EncodeToString(m.Sum(nil))
}

// sealForwardedFor returns the header value for a client at ip.
func (s *Server) sealForwardedFor(ip string, now time.Time) string {
	u := now.Unix()
	return ip + " " + strconv.FormatInt(u, 10) + " " + s.forwardedForMAC(s.node.NodeID(), ip, u)
}

// source returns the address a request is charged to: the verified
// forwarded client address, else the connection's IP.
func (s *Server) source(r *http.Request, now time.Time) string {
	remote := sourceOf(r.RemoteAddr)
	v, by := r.Header.Get(ForwardedForHeader), r.Header.Get(ForwardedHeader)
	if v == "" || by == "" {
		return remote
	}
	f := strings.Fields(v)
	if len(f) != 3 {
		return remote
	}
	u, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil || now.Sub(time.Unix(u, 0)).Abs() > forwardedForSkew {
		return remote
	}
	if !hmac.Equal([]byte(f[2]), []byte(s.forwardedForMAC(by, f[0], u))) {
		return remote
	}
	return f[0]
}
