// Test of the replication pipeline wrapper (pipeline.go). Goal: when
// raft's reader stops reading a pipeline after an answer that refuses the
// append — as hashicorp/raft v1.8's pipelineDecode does — the sender's
// next AppendEntries returns an error instead of blocking forever (the
// deadlock that hung raft.Shutdown while pipelining was on). Method: two
// real NetworkTransports on loopback; the follower refuses every append;
// the test plays raft's two pipeline goroutines.
package node

import (
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func TestSafePipeline_SenderReturnsAfterReaderStops(t *testing.T) {
	t.Parallel()
	cfg := func() *raft.NetworkTransportConfig {
		return &raft.NetworkTransportConfig{MaxPool: 2, Timeout: 10 * time.Second, MaxRPCsInFlight: maxRPCsInFlight}
	}
	follower, err := raft.NewTCPTransportWithConfig("127.0.0.1:0", nil, cfg())
	if err != nil {
		t.Fatal(err)
	}
	defer follower.Close()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case rpc := <-follower.Consumer():
				rpc.Respond(&raft.AppendEntriesResponse{Term: 1, Success: false}, nil)
			case <-stop:
				return
			}
		}
	}()
	leader, err := raft.NewTCPTransportWithConfig("127.0.0.1:0", nil, cfg())
	if err != nil {
		t.Fatal(err)
	}
	defer leader.Close()
	p, err := pipelinedTransport{leader}.AppendEntriesPipeline("f", follower.LocalAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	// The sender keeps sending, more than the pipeline holds.
	sent := make(chan error, 1)
	go func() {
		for range 4 * maxRPCsInFlight {
			if _, err := p.AppendEntries(&raft.AppendEntriesRequest{Term: 1}, new(raft.AppendEntriesResponse)); err != nil {
				sent <- err
				return
			}
		}
		sent <- nil
	}()
	// The reader takes one answer, a refusal, and stops reading.
	select {
	case f := <-p.Consumer():
		if !pipelineEnds(f) {
			t.Fatalf("the follower's refusal does not end the pipeline: %+v", f.Response())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no answer through the pipeline in 30 s")
	}
	select {
	case err := <-sent:
		if err == nil {
			t.Fatalf("%d requests went into a pipeline nobody reads", 4*maxRPCsInFlight)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("AppendEntries still blocked 30 s after the reader stopped: the pipeline deadlock")
	}
}

func TestPipelineEnds(t *testing.T) {
	t.Parallel()
	ok := &raft.AppendEntriesResponse{Term: 2, Success: true}
	for _, c := range []struct {
		name string
		req  *raft.AppendEntriesRequest
		resp *raft.AppendEntriesResponse
		err  error
		want bool
	}{
		{"appended", &raft.AppendEntriesRequest{Term: 2}, ok, nil, false},
		{"refused", &raft.AppendEntriesRequest{Term: 2}, &raft.AppendEntriesResponse{Term: 2}, nil, true},
		{"newer term", &raft.AppendEntriesRequest{Term: 1}, ok, nil, true},
		{"failed RPC", &raft.AppendEntriesRequest{Term: 2}, ok, raft.ErrPipelineShutdown, true},
		{"no response", &raft.AppendEntriesRequest{Term: 2}, nil, nil, true},
	} {
		if got := pipelineEnds(fakeAppendFuture{req: c.req, resp: c.resp, err: c.err}); got != c.want {
			t.Errorf("pipelineEnds(%s) = %v, want %v", c.name, got, c.want)
		}
	}
}

type fakeAppendFuture struct {
	req  *raft.AppendEntriesRequest
	resp *raft.AppendEntriesResponse
	err  error
}

func (f fakeAppendFuture) Error() error                          { return f.err }
func (f fakeAppendFuture) Start() time.Time                      { return time.Time{} }
func (f fakeAppendFuture) Request() *raft.AppendEntriesRequest   { return f.req }
func (f fakeAppendFuture) Response() *raft.AppendEntriesResponse { return f.resp }
