// Tests of the client's retries and failover against scripted httptest
// nodes. Goal: each error code gets the documented number of tries; a node
// that accepts connections and never answers (a SIGSTOPped process: a
// listener nobody accepts on, whose kernel backlog completes the TCP
// handshake) costs a replay-safe call one attempt deadline and then the
// call moves to the next URL, while a call that is not safe to replay is
// never re-sent; an Acquire long-poll keeps its wait and is re-issued on
// another node when wait plus deadline pass; a leader hint is followed.
// Method: a recording transport lists the host of every try.
package client_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/termivar/distributed/client"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/gen/termivar/v1/termivarv1connect"
)

// fakeNode answers GetTask, CreateKey and Acquire with answer's error (nil:
// success) and counts the requests it got.
type fakeNode struct {
	termivarv1connect.UnimplementedProducerHandler
	termivarv1connect.UnimplementedAdminHandler
	termivarv1connect.UnimplementedWorkerHandler
	srv    *httptest.Server
	host   string
	hits   atomic.Int64
	answer func() error
}

// Session answers both services' Session (their embedded Unimplemented
// handlers make the name ambiguous): the fake has no sessions.
func (n *fakeNode) Session(context.Context, *connect.BidiStream[pb.SessionRequest, pb.SessionResponse]) error {
	return connect.NewError(connect.CodeUnimplemented, errors.New("fake node: no sessions"))
}

func newFakeNode(t *testing.T, answer func() error) *fakeNode {
	t.Helper()
	n := &fakeNode{answer: answer}
	mux := http.NewServeMux()
	mux.Handle(termivarv1connect.NewProducerHandler(n))
	mux.Handle(termivarv1connect.NewAdminHandler(n))
	mux.Handle(termivarv1connect.NewWorkerHandler(n))
	n.srv = httptest.NewServer(mux)
	n.host = hostOf(t, n.srv.URL)
	t.Cleanup(n.srv.Close)
	return n
}

func (n *fakeNode) reply() error {
	n.hits.Add(1)
	if n.answer == nil {
		return nil
	}
	return n.answer()
}

func (n *fakeNode) GetTask(context.Context, *connect.Request[pb.GetTaskRequest]) (*connect.Response[pb.GetTaskResponse], error) {
	if err := n.reply(); err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.GetTaskResponse{Task: &pb.TaskInfo{TaskId: "t"}}), nil
}

func (n *fakeNode) CreateKey(context.Context, *connect.Request[pb.CreateKeyRequest]) (*connect.Response[pb.CreateKeyResponse], error) {
	if err := n.reply(); err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.CreateKeyResponse{Key: "k"}), nil
}

// Acquire long-polls for the request's wait, then answers with no tasks.
func (n *fakeNode) Acquire(ctx context.Context, req *connect.Request[pb.AcquireRequest]) (*connect.Response[pb.AcquireResponse], error) {
	if err := n.reply(); err != nil {
		return nil, err
	}
	t := time.NewTimer(time.Duration(req.Msg.GetWaitSecs()) * time.Second)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.C:
	}
	return connect.NewResponse(&pb.AcquireResponse{}), nil
}

// pausedNode returns the URL of a listener nobody accepts on: connections
// complete in the kernel's backlog and requests are never answered, as with
// a SIGSTOPped node.
func pausedNode(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return "http://" + ln.Addr().String()
}

func hostOf(t *testing.T, s string) string {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// recorder is an http.RoundTripper that lists the host of every try.
type recorder struct {
	next  *http.Transport
	mu    sync.Mutex
	hosts []string
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	r.hosts = append(r.hosts, req.URL.Host)
	r.mu.Unlock()
	return r.next.RoundTrip(req)
}

func (r *recorder) CloseIdleConnections() { r.next.CloseIdleConnections() }

// take returns the hosts tried since the last take.
func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.hosts
	r.hosts = nil
	return h
}

func newRecordingClient(t *testing.T, serverURL string, attempt time.Duration) (*client.Client, *recorder) {
	t.Helper()
	rec := &recorder{next: http.DefaultTransport.(*http.Transport).Clone()}
	c, err := client.New(client.Config{ServerURL: serverURL, Key: "k", HTTPClient: &http.Client{Transport: rec},
		MaxAttempts: 3, MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond, AttemptTimeout: attempt})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, rec
}

func equalHosts(got, want []string) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}

func unavailable(kind string, header map[string]string) func() error {
	return func() error {
		ce := connect.NewError(connect.CodeUnavailable, errors.New("scripted"))
		if kind != "" {
			d, err := connect.NewErrorDetail(&pb.ErrorDetail{Kind: kind})
			if err != nil {
				panic(err)
			}
			ce.AddDetail(d)
		}
		for k, v := range header {
			ce.Meta().Set(k, v)
		}
		return ce
	}
}

func TestClient_AttemptsPerCode(t *testing.T) {
	t.Parallel()
	unknown := map[string]string{client.OutcomeHeader: client.OutcomeUnknown}
	tests := []struct {
		name   string
		answer func() error
		safe   bool // GetTask (replay-safe) or CreateKey (not)
		want   int64
	}{
		{"unavailable/read", unavailable("", nil), true, 3},
		{"unavailable/create-key", unavailable("", nil), false, 3},
		{"not-leader/read", unavailable("not_leader", nil), true, 3},
		{"outcome-unknown/read", unavailable("not_leader", unknown), true, 3},
		{"outcome-unknown/create-key", unavailable("not_leader", unknown), false, 1},
		{"resource-exhausted/read", func() error { return connect.NewError(connect.CodeResourceExhausted, errors.New("full")) }, true, 1},
		{"failed-precondition/read", func() error { return connect.NewError(connect.CodeFailedPrecondition, errors.New("no")) }, true, 1},
		{"not-found/read", func() error { return connect.NewError(connect.CodeNotFound, errors.New("no")) }, true, 1},
		{"server-deadline/read", func() error { return connect.NewError(connect.CodeDeadlineExceeded, errors.New("slow")) }, true, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			n := newFakeNode(t, tt.answer)
			c, _ := newRecordingClient(t, n.srv.URL, time.Second)
			var err error
			if tt.safe {
				_, err = c.GetTask(context.Background(), &pb.GetTaskRequest{TaskId: "t"})
			} else {
				_, err = c.CreateKey(context.Background(), &pb.CreateKeyRequest{Role: "worker"})
			}
			if err == nil {
				t.Fatal("call succeeded against a failing node")
			}
			if got := n.hits.Load(); got != tt.want {
				t.Errorf("tries = %d, want %d (err %v)", got, tt.want, err)
			}
		})
	}
}

func TestClient_PausedNodeReplaySafeMovesOn(t *testing.T) {
	t.Parallel()
	paused, good := pausedNode(t), newFakeNode(t, nil)
	c, rec := newRecordingClient(t, paused+","+good.srv.URL, 100*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.GetTask(ctx, &pb.GetTaskRequest{TaskId: "t"}); err != nil {
		t.Fatalf("GetTask(paused, good) = %v, want success on the second node", err)
	}
	if got, want := rec.take(), []string{hostOf(t, paused), good.host}; !equalHosts(got, want) {
		t.Errorf("tries went to %v, want %v", got, want)
	}
	// The route stays on the node that answered.
	if _, err := c.GetTask(ctx, &pb.GetTaskRequest{TaskId: "t"}); err != nil {
		t.Fatal(err)
	}
	if got, want := rec.take(), []string{good.host}; !equalHosts(got, want) {
		t.Errorf("next call went to %v, want %v", got, want)
	}
}

func TestClient_PausedNodeUnsafeNotResent(t *testing.T) {
	t.Parallel()
	paused, good := pausedNode(t), newFakeNode(t, nil)
	c, rec := newRecordingClient(t, paused+","+good.srv.URL, 50*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err := c.CreateKey(ctx, &pb.CreateKeyRequest{Role: "worker"})
	if connect.CodeOf(err) != connect.CodeDeadlineExceeded {
		t.Fatalf("CreateKey(paused) = %v, want the caller's deadline", err)
	}
	if got, want := rec.take(), []string{hostOf(t, paused)}; !equalHosts(got, want) {
		t.Errorf("tries went to %v, want %v (CreateKey is not safe to replay)", got, want)
	}
	if good.hits.Load() != 0 {
		t.Error("CreateKey was re-sent to another node")
	}
}

func TestClient_AllPausedIsUnreachable(t *testing.T) {
	t.Parallel()
	p1, p2 := pausedNode(t), pausedNode(t)
	c, rec := newRecordingClient(t, p1+","+p2, 50*time.Millisecond)
	_, err := c.GetTask(context.Background(), &pb.GetTaskRequest{TaskId: "t"})
	if !client.IsUnreachable(err) || !client.MayHaveApplied(err) {
		t.Fatalf("GetTask(all paused) = %v, want unreachable with an unknown outcome (no try was answered)", err)
	}
	h1, h2 := hostOf(t, p1), hostOf(t, p2)
	if got, want := rec.take(), []string{h1, h2, h1}; !equalHosts(got, want) {
		t.Errorf("tries went to %v, want %v", got, want)
	}
}

func TestClient_AcquireLongPoll(t *testing.T) {
	t.Parallel()
	t.Run("wait-is-not-cut", func(t *testing.T) {
		t.Parallel()
		good := newFakeNode(t, nil)
		c, rec := newRecordingClient(t, good.srv.URL, 50*time.Millisecond)
		if _, err := c.Acquire(context.Background(), &pb.AcquireRequest{WorkerId: "w", WaitSecs: 1}); err != nil {
			t.Fatalf("Acquire(wait 1 s, attempt timeout 50 ms) = %v", err)
		}
		if got := rec.take(); len(got) != 1 {
			t.Errorf("tries = %v, want one: the attempt deadline adds the wait", got)
		}
	})
	t.Run("re-issued-after-wait", func(t *testing.T) {
		t.Parallel()
		paused, good := pausedNode(t), newFakeNode(t, nil)
		c, rec := newRecordingClient(t, paused+","+good.srv.URL, 50*time.Millisecond)
		if _, err := c.Acquire(context.Background(), &pb.AcquireRequest{WorkerId: "w", WaitSecs: 1}); err != nil {
			t.Fatalf("Acquire(paused, good) = %v", err)
		}
		if got, want := rec.take(), []string{hostOf(t, paused), good.host}; !equalHosts(got, want) {
			t.Errorf("tries went to %v, want %v", got, want)
		}
	})
}

func TestClient_FollowsLeaderHint(t *testing.T) {
	t.Parallel()
	leader := newFakeNode(t, nil)
	follower := newFakeNode(t, unavailable("not_leader", map[string]string{client.LeaderHeader: leader.srv.URL}))
	c, rec := newRecordingClient(t, follower.srv.URL, time.Second)
	ctx := context.Background()
	if _, err := c.GetTask(ctx, &pb.GetTaskRequest{TaskId: "t"}); err != nil {
		t.Fatal(err)
	}
	if got, want := rec.take(), []string{follower.host, leader.host}; !equalHosts(got, want) {
		t.Errorf("tries went to %v, want %v", got, want)
	}
	if _, err := c.GetTask(ctx, &pb.GetTaskRequest{TaskId: "t"}); err != nil {
		t.Fatal(err)
	}
	if got, want := rec.take(), []string{leader.host}; !equalHosts(got, want) {
		t.Errorf("next call went to %v, want the leader %v", got, want)
	}
}

// joinNode answers its first Join with an unknown outcome (a forward cut
// by a leader change) and every later one with success.
type joinNode struct {
	termivarv1connect.UnimplementedClusterHandler
	hits atomic.Int64
}

func (n *joinNode) Join(context.Context, *connect.Request[pb.JoinRequest]) (*connect.Response[pb.JoinResponse], error) {
	if n.hits.Add(1) == 1 {
		return nil, unavailable("not_leader", map[string]string{client.OutcomeHeader: client.OutcomeUnknown})()
	}
	return connect.NewResponse(&pb.JoinResponse{ClusterSecret: []byte("s")}), nil
}

// TestClient_CredentialOnlyJoinReplayed: a credential_only Join changes
// nothing, so it is sent again after an unknown outcome; a membership Join
// is not (doc.go's table).
func TestClient_CredentialOnlyJoinReplayed(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		req   *pb.JoinRequest
		tries int64
		ok    bool
	}{
		{"credential-only", &pb.JoinRequest{NodeId: "n9", CredentialOnly: true}, 2, true},
		{"member", &pb.JoinRequest{NodeId: "n9", RaftAddr: "127.0.0.1:1"}, 1, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			n := &joinNode{}
			mux := http.NewServeMux()
			mux.Handle(termivarv1connect.NewClusterHandler(n))
			srv := httptest.NewServer(mux)
			t.Cleanup(srv.Close)
			c, _ := newRecordingClient(t, srv.URL, time.Second)
			_, err := c.Join(context.Background(), tt.req)
			if got := n.hits.Load(); got != tt.tries || (err == nil) != tt.ok {
				t.Fatalf("Join: %d tries, err %v; want %d tries, success %v", got, err, tt.tries, tt.ok)
			}
			if !tt.ok && !client.MayHaveApplied(err) {
				t.Fatalf("the membership Join's error %v does not say it may have applied", err)
			}
		})
	}
}
