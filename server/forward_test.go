// Tests of a follower's forward to the leader. Goal: a forward to a leader
// that accepts connections and never answers (a SIGSTOPped node: a
// listener nobody accepts on) stops as soon as the node's view of the
// leader changes, and after ForwardTimeout for a call that does not wait on
// purpose, answering not_leader with the current leader hint and an
// unknown outcome; an Acquire long-poll is not cut by ForwardTimeout; a
// leader that cannot be dialled answers not_leader without the unknown
// outcome (nothing was sent). Method: a forwarder whose view of the leader
// is a test function, in front of an httptest server.
package server

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/gen/termivar/v1/termivarv1connect"
	"github.com/termivar/distributed/internal/wireerr"
)

type forwardBundle struct {
	f        *forwarder
	leader   atomic.Pointer[string]
	polls    atomic.Int64
	producer termivarv1connect.ProducerClient
	worker   termivarv1connect.WorkerClient
	cluster  termivarv1connect.ClusterClient
	url      string // the forwarder's
}

// setupForward serves a forwarder to leader with the given ForwardTimeout.
func setupForward(t *testing.T, leader string, timeout time.Duration) *forwardBundle {
	t.Helper()
	b := &forwardBundle{}
	b.leader.Store(&leader)
	b.f = &forwarder{errw: connect.NewErrorWriter(), proxies: map[string]*httputil.ReverseProxy{}, tr: newForwardTransport(nil),
		nodeID: "follower", timeout: timeout, log: slog.New(slog.DiscardHandler),
		leaderURLFunc: func() string { b.polls.Add(1); return *b.leader.Load() }}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l := b.f.leaderURLFunc()
		p, err := b.f.proxy(l)
		if err != nil {
			b.f.writeErr(w, r, "", "bad leader URL")
			return
		}
		b.f.forward(w, r, l, p)
	}))
	srv.Config.Protocols = NewHTTPServer("", nil).Protocols // HTTP/1.1 and h2c (gRPC)
	srv.Start()
	b.url = srv.URL
	hc := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	t.Cleanup(func() {
		srv.Close()
		hc.CloseIdleConnections()
		b.f.tr.CloseIdleConnections()
	})
	b.producer = termivarv1connect.NewProducerClient(hc, srv.URL)
	b.worker = termivarv1connect.NewWorkerClient(hc, srv.URL)
	b.cluster = termivarv1connect.NewClusterClient(hc, srv.URL)
	return b
}

// pausedLeader is the URL of a listener nobody accepts on.
func pausedLeader(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return "http://" + ln.Addr().String()
}

// checkNotLeader asserts err is Unavailable / not_leader with the given
// leader hint and outcome header.
func checkNotLeader(t *testing.T, err error, leader, outcome string) {
	t.Helper()
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeUnavailable {
		t.Fatalf("forward error = %v, want Unavailable", err)
	}
	if d, ok := wireerr.DetailOf(ce); !ok || d.GetKind() != KindNotLeader {
		t.Errorf("forward error = %v, want kind %s", err, KindNotLeader)
	}
	if got := ce.Meta().Get(LeaderHeader); got != leader {
		t.Errorf("leader hint = %q, want %q", got, leader)
	}
	if got := ce.Meta().Get(OutcomeHeader); got != outcome {
		t.Errorf("outcome header = %q, want %q", got, outcome)
	}
}

func TestForwarder_StopsWhenLeaderChanges(t *testing.T) {
	t.Parallel()
	b := setupForward(t, pausedLeader(t), time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := b.producer.GetTask(ctx, connect.NewRequest(&pb.GetTaskRequest{TaskId: "t"}))
		done <- err
	}()
	// One look-up by the handler, then at least one by the watch: the
	// request is being forwarded.
	waitUntil(t, "the forward to watch the leader", func() bool { return b.polls.Load() >= 2 })
	newLeader := "http://127.0.0.1:1"
	b.leader.Store(&newLeader)
	err := <-done
	if ctx.Err() != nil {
		t.Fatalf("the forward held the request until the caller's deadline: %v", err)
	}
	checkNotLeader(t, err, newLeader, OutcomeUnknown)
}

func TestForwarder_Bound(t *testing.T) {
	t.Parallel()
	t.Run("unary-call", func(t *testing.T) {
		t.Parallel()
		leader := pausedLeader(t)
		b := setupForward(t, leader, 100*time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, err := b.producer.GetTask(ctx, connect.NewRequest(&pb.GetTaskRequest{TaskId: "t"}))
		if ctx.Err() != nil {
			t.Fatalf("the forward held the request until the caller's deadline: %v", err)
		}
		checkNotLeader(t, err, "", OutcomeUnknown) // no hint: that leader does not answer
	})
	t.Run("acquire-long-poll", func(t *testing.T) {
		t.Parallel()
		b := setupForward(t, pausedLeader(t), 100*time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
		defer cancel()
		_, err := b.worker.Acquire(ctx, connect.NewRequest(&pb.AcquireRequest{WorkerId: "w", WaitSecs: 30}))
		if connect.CodeOf(err) != connect.CodeDeadlineExceeded {
			t.Fatalf("Acquire(wait 30 s) through a 100 ms forward bound = %v, want the caller's own deadline", err)
		}
	})
	t.Run("follow-results-long-poll", func(t *testing.T) {
		t.Parallel()
		b := setupForward(t, pausedLeader(t), 100*time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
		defer cancel()
		_, err := b.producer.FollowResults(ctx, connect.NewRequest(&pb.FollowResultsRequest{ScanId: "s", WaitSecs: 30}))
		if connect.CodeOf(err) != connect.CodeDeadlineExceeded {
			t.Fatalf("FollowResults(wait 30 s) through a 100 ms forward bound = %v, want the caller's own deadline", err)
		}
	})
}

func TestForwarder_LeaderNotDialled(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	leader := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now
	b := setupForward(t, leader, time.Minute)
	_, err = b.producer.GetTask(context.Background(), connect.NewRequest(&pb.GetTaskRequest{TaskId: "t"}))
	checkNotLeader(t, err, "", "")
}

// TestForwarder_TransferLeadershipOutlivesTheChange: a forwarded
// TransferLeadership changes the leader on purpose; the forward must wait
// for the old leader's answer instead of giving up when the change shows
// (it did, under -race: `cluster transfer-leadership` through a follower
// then failed although the transfer succeeded).
func TestForwarder_TransferLeadershipOutlivesTheChange(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var arrived atomic.Int64
	old := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Add(1)
		<-release
		w.Header().Set("Content-Type", "application/proto")
	}))
	old.Config.Protocols = NewHTTPServer("", nil).Protocols // h2c, as the forward speaks it
	old.Start()
	t.Cleanup(old.Close)
	b := setupForward(t, old.URL, time.Minute)
	transfer, watched := make(chan error, 1), make(chan error, 1)
	go func() {
		_, err := b.cluster.TransferLeadership(context.Background(), connect.NewRequest(&pb.TransferLeadershipRequest{NodeId: "n2"}))
		transfer <- err
	}()
	// A watched call forwarded beside it shows when the leader watch has
	// seen the change: it is cut then, and the transfer must not be.
	go func() {
		_, err := b.producer.GetTask(context.Background(), connect.NewRequest(&pb.GetTaskRequest{TaskId: "t"}))
		watched <- err
	}()
	waitUntil(t, "both forwards to reach the old leader", func() bool { return arrived.Load() == 2 })
	newLeader := "http://127.0.0.1:1"
	b.leader.Store(&newLeader)
	checkNotLeader(t, <-watched, newLeader, OutcomeUnknown)
	close(release)
	if err := <-transfer; err != nil {
		t.Fatalf("TransferLeadership through the forward = %v, want the old leader's answer", err)
	}
}

// TestForwarder_LeaderChangeAfterAnswerBegan: the leader has begun its
// answer (response headers sent: for a Connect unary call, status 200 says
// the call succeeded) when the node's view of the leader changes. The
// forward must not hand the client a cut-off response, which connect
// reports as a definite-looking code (Unknown "read message: unexpected
// EOF" over HTTP/1.1, Internal over HTTP/2): the client would neither
// retry the call nor treat its outcome as unknown, although the leader
// applied it. It answers not_leader with an unknown outcome instead.
func TestForwarder_LeaderChangeAfterAnswerBegan(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var began atomic.Int64
	old := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/proto")
		w.WriteHeader(http.StatusOK)
		http.NewResponseController(w).Flush()
		began.Add(1)
		<-release
		b, _ := proto.Marshal(&pb.CompleteResponse{Revision: 7})
		_, _ = w.Write(b)
	}))
	old.Config.Protocols = NewHTTPServer("", nil).Protocols // h2c, as the forward speaks it
	old.Start()
	t.Cleanup(old.Close)
	defer close(release)
	b := setupForward(t, old.URL, time.Minute)
	done := make(chan error, 1)
	go func() {
		_, err := b.worker.Complete(context.Background(), connect.NewRequest(&pb.CompleteRequest{LeaseToken: []byte("t")}))
		done <- err
	}()
	waitUntil(t, "the leader to begin its answer", func() bool { return began.Load() == 1 })
	newLeader := "http://127.0.0.1:1"
	b.leader.Store(&newLeader)
	checkNotLeader(t, <-done, newLeader, OutcomeUnknown)
}

// getTaskLeader answers GetTask: the task for "t", task_not_found for any
// other ID.
type getTaskLeader struct {
	termivarv1connect.UnimplementedProducerHandler
}

func (getTaskLeader) GetTask(_ context.Context, r *connect.Request[pb.GetTaskRequest]) (*connect.Response[pb.GetTaskResponse], error) {
	if r.Msg.GetTaskId() != "t" {
		return nil, toConnect(&distributed.Error{Kind: distributed.KindTaskNotFound, TaskID: r.Msg.GetTaskId()})
	}
	return connect.NewResponse(&pb.GetTaskResponse{Task: &pb.TaskInfo{TaskId: "t"}}), nil
}

// TestForwarder_UnaryAnswersPassWhole: the forward reads a unary answer
// whole before passing it on (bufferUnaryAnswer); the answer, an error's
// code and detail, and gRPC's trailers (grpc-status) still reach the
// client unchanged, over the Connect protocol and gRPC.
func TestForwarder_UnaryAnswersPassWhole(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	mux.Handle(termivarv1connect.NewProducerHandler(getTaskLeader{}))
	leader := httptest.NewUnstartedServer(mux)
	leader.Config.Protocols = NewHTTPServer("", nil).Protocols
	leader.Start()
	t.Cleanup(leader.Close)
	b := setupForward(t, leader.URL, time.Minute)
	hc := h2cClient("")
	t.Cleanup(hc.CloseIdleConnections)
	for name, pc := range map[string]termivarv1connect.ProducerClient{
		"connect": b.producer,
		"grpc":    termivarv1connect.NewProducerClient(hc, b.url, connect.WithGRPC()),
	} {
		res, err := pc.GetTask(context.Background(), connect.NewRequest(&pb.GetTaskRequest{TaskId: "t"}))
		if err != nil || res.Msg.GetTask().GetTaskId() != "t" {
			t.Fatalf("%s: GetTask(t) through the forward = %v, %v; want task t", name, res, err)
		}
		_, err = pc.GetTask(context.Background(), connect.NewRequest(&pb.GetTaskRequest{TaskId: "u"}))
		if code, kind := errKind(err); code != connect.CodeNotFound || kind != "task_not_found" {
			t.Fatalf("%s: GetTask(u) through the forward = %v; want not_found / task_not_found", name, err)
		}
	}
}
