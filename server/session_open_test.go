package server

import (
	"context"
	"testing"

	"connectrpc.com/connect"

	"github.com/termivar/distributed/gen/termivar/v1/termivarv1connect"
)

// TestSession_EndWithoutMessageEveryProtocol: a session that ends before
// it answered any message (here: shutdown while it waits for its first)
// still reports its end, Unavailable, over Connect, gRPC and gRPC-Web.
// The server sends a stream's response headers at its open (session.go),
// except over gRPC-Web, whose "trailers-only" end puts the status in
// those headers.
func TestSession_EndWithoutMessageEveryProtocol(t *testing.T) {
	for name, opts := range map[string][]connect.ClientOption{
		"connect": nil, "grpc": {connect.WithGRPC()}, "grpcweb": {connect.WithGRPCWeb()},
	} {
		t.Run(name, func(t *testing.T) {
			b := setup(t, nil)
			key, _ := sessionWorker(t, b)
			hc := h2cHTTPClient()
			t.Cleanup(hc.CloseIdleConnections)
			wc := termivarv1connect.NewWorkerClient(hc, b.srv.URL, append(opts, connect.WithInterceptors(authInterceptor{key}))...)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			st := wc.Session(ctx)
			defer st.CloseResponse()
			if err := st.Send(nil); err != nil { // the request headers alone
				t.Fatal(err)
			}
			waitUntil(t, "the session is open", func() bool {
				b.api.sessions.mu.Lock()
				defer b.api.sessions.mu.Unlock()
				return len(b.api.sessions.open) == 1
			})
			b.api.Close()
			if _, err := recvMsg(t, st); connect.CodeOf(err) != connect.CodeUnavailable {
				t.Fatalf("stream end: %v (code %v), want Unavailable", err, connect.CodeOf(err))
			}
		})
	}
}
