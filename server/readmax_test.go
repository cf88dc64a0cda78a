package server

// Goal: each service enforces its own request size, on the decompressed
// message (issue 14: the Worker service losing WithReadMaxBytes survived).
// Method: for every service, a gzip-compressed message (small on the wire)
// just above its limit is refused with ResourceExhausted and one just
// below is not; the limits are the documented constants.

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	pb "github.com/termivar/distributed/gen/termivar/v1"
)

func TestServer_RequestSizePerService(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	cases := []struct {
		path  string
		limit int
		msg   func(n int) proto.Message
	}{
		{"/termivar.v1.Worker/Complete", MaxWorkerRequestBytes, func(n int) proto.Message {
			return &pb.CompleteRequest{LeaseToken: []byte("x"), Result: make([]byte, n)}
		}},
		{"/termivar.v1.Producer/Enqueue", MaxProducerRequestBytes, func(n int) proto.Message {
			return &pb.EnqueueRequest{Tasks: []*pb.NewTask{{TaskId: "t", ScanId: "s", TargetRef: strings.Repeat("a", n)}}}
		}},
		{"/termivar.v1.Admin/CreateTenant", MaxAdminRequestBytes, func(n int) proto.Message {
			return &pb.CreateTenantRequest{Name: strings.Repeat("a", n)}
		}},
		{"/termivar.v1.Cluster/Join", MaxAdminRequestBytes, func(n int) proto.Message {
			return &pb.JoinRequest{NodeId: strings.Repeat("a", n)}
		}},
	}
	for _, c := range cases {
		for _, over := range []bool{false, true} {
			n := c.limit - 64<<10 // the message's own framing stays below the limit
			if over {
				n = c.limit + 1
			}
			code := postGzipProto(t, b, c.path, c.msg(n))
			if got := code == connect.CodeResourceExhausted; got != over {
				t.Errorf("%s with a %d-byte field: code %v; want resource_exhausted only above the limit %d", c.path, n, code, c.limit)
			}
		}
	}
}

// postGzipProto sends msg gzip-compressed as a Connect unary call and
// returns the answer's code (0 for success).
func postGzipProto(t *testing.T, b *testBundle, path string, msg proto.Message) connect.Code {
	t.Helper()
	raw, err := proto.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	var body bytes.Buffer
	zw := gzip.NewWriter(&body)
	if _, err := zw.Write(raw); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, b.srv.URL+path, &body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/proto")
	req.Header.Set("Content-Encoding", "gzip")
	req.Header.Set("Authorization", "Bearer "+b.adminKey)
	resp, err := b.srv.Client().Do(req)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		return 0
	}
	var e struct {
		Code string `json:"code"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&e)
	var code connect.Code
	if err := code.UnmarshalText([]byte(e.Code)); err != nil {
		t.Fatalf("%s: HTTP %d with code %q", path, resp.StatusCode, e.Code)
	}
	return code
}
