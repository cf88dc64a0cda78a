package client

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// LeaderHeader is the response header in which a cluster node that cannot
// forward a request names the leader's API URL (server.LeaderHeader).
const LeaderHeader = "Termivar-Leader"

// OutcomeHeader is set to OutcomeUnknown on an Unavailable answer of a node
// that forwarded the request to a leader and got no answer (the leader
// stopped answering or lost leadership meanwhile), or of a leader that
// lost leadership after the request's entry reached its log: the request
// may have been applied. Calls that are not safe to replay are not retried
// after such an answer (server.OutcomeHeader).
const (
	OutcomeHeader  = "Termivar-Outcome"
	OutcomeUnknown = "unknown"
)

// router picks the node a request goes to. A Client is configured with one
// or more node URLs (ServerURL "http://a:7420,http://b:7420"); requests go
// to the current one. A not_leader answer that names the leader switches to
// the leader; a connection failure, or a try that ran out of its attempt
// deadline, moves on from the node that failed (so a client survives the
// loss or the pause of the node it talks to).
type router struct {
	mu      sync.Mutex
	urls    []*url.URL
	current int
	leader  *url.URL // set from a LeaderHeader until it fails
	// suspect maps a host to when a try there last went unanswered; the
	// route passes over it, and leader hints naming it, for suspectFor
	// unless every URL is suspect or it answers again.
	suspect map[string]time.Time
}

// suspectFor is how long a node that left a try unanswered is passed over
// when the route moves on, so that a client does not bounce back to a
// paused node while the others elect a leader.
const suspectFor = 10 * time.Second

// targetKey is the context key of a try's target (*url.URL).
type targetKey struct{}

func parseServerURLs(s string) ([]*url.URL, error) {
	var out []*url.URL
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimRight(strings.TrimSpace(part), "/")
		if part == "" {
			continue
		}
		u, err := url.Parse(part)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, errors.New("client: server URL must be http(s)://host:port")
		}
		out = append(out, u)
	}
	if len(out) == 0 {
		return nil, errors.New("client: server URL must be http(s)://host:port")
	}
	return out, nil
}

// target returns the scheme and host the next request should use.
func (r *router) target() *url.URL {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.leader != nil {
		return r.leader
	}
	return r.urls[r.current]
}

// observe updates the route after a try at target failed; timedOut says
// the try ran out of its attempt deadline.
func (r *router) observe(target *url.URL, err error, timedOut bool) {
	if timedOut {
		r.skip(target)
		return
	}
	var ce *connect.Error
	if err == nil || !errors.As(err, &ce) || ce.Code() != connect.CodeUnavailable {
		return
	}
	if l := ce.Meta().Get(LeaderHeader); l != "" {
		if u, perr := url.Parse(l); perr == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" {
			r.follow(u)
			return
		}
	}
	if len(ce.Details()) > 0 {
		return // the node answered (e.g. no leader yet): stay
	}
	// NB: no answer at all: the node is down or unreachable.
	r.skip(target)
}

// follow routes to the leader a hint names — unless that node left a try
// unanswered within suspectFor: a node that has not noticed the leader's
// pause yet still names it, and the route stays where it is (the nodes
// there forward to whichever leader they know).
func (r *router) follow(leader *url.URL) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if at, ok := r.suspect[leader.Host]; ok && time.Since(at) < suspectFor {
		return
	}
	r.leader = leader
}

// skip moves the route off target and marks it suspect: a leader hint
// naming it is dropped and, if it is the current configured URL, the next
// URL that is not suspect becomes current (the next one if all are). A
// route that has already moved on is left alone, so that many concurrent
// calls failing on the same node move the route once, not once each.
func (r *router) skip(target *url.URL) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.suspect == nil {
		r.suspect = map[string]time.Time{}
	}
	r.suspect[target.Host] = now
	if r.leader != nil && r.leader.Host == target.Host {
		r.leader = nil
	}
	if r.urls[r.current].Host != target.Host {
		return
	}
	n := len(r.urls)
	next := (r.current + 1) % n // every URL is suspect: the next one
	for i := 1; i < n; i++ {
		j := (r.current + i) % n
		if at, ok := r.suspect[r.urls[j].Host]; !ok || now.Sub(at) >= suspectFor {
			next = j
			break
		}
	}
	r.current = next
}

// answered clears target's suspect mark after a try there got an answer.
func (r *router) answered(target *url.URL) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.suspect) > 0 {
		delete(r.suspect, target.Host)
	}
}

// rewrite points req at t (the generated clients are built for the first
// URL).
func (r *router) rewrite(req *http.Request, t *url.URL) {
	if t == r.urls[0] {
		return
	}
	req.URL.Scheme, req.URL.Host, req.Host = t.Scheme, t.Host, ""
	if t.Path != "" && t.Path != r.urls[0].Path {
		req.URL.Path = t.Path + strings.TrimPrefix(req.URL.Path, r.urls[0].Path)
	}
}

// Cluster service (admin keys of the system tenant).

// Join asks the cluster to add a node as a voter; the response carries the
// cluster secret.
func (c *Client) Join(ctx context.Context, req *pb.JoinRequest) (*pb.JoinResponse, error) {
	return call(ctx, c, "Cluster.Join", req, c.clusterSvc().Join)
}

// Members lists the raft configuration as the node asked sees it.
func (c *Client) Members(ctx context.Context, req *pb.MembersRequest) (*pb.MembersResponse, error) {
	return call(ctx, c, "Cluster.Members", req, c.clusterSvc().Members)
}

// RemoveMember removes a node from the raft configuration.
func (c *Client) RemoveMember(ctx context.Context, req *pb.RemoveMemberRequest) (*pb.RemoveMemberResponse, error) {
	return call(ctx, c, "Cluster.RemoveMember", req, c.clusterSvc().RemoveMember)
}
