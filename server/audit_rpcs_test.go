package server

// Goal: every mutating RPC writes exactly one audit line per request,
// accepted or rejected, and no read writes any (issue 14: "Fail is no
// longer audited" survived because the audit test only checked Enqueue).
// Method: one table classifies every RPC of every service, read from the
// generated descriptors so that a new RPC without a classification fails;
// each unary RPC is called once with an empty JSON body and the admin key
// (most are then rejected as invalid, which must be audited too), and the
// audit lines are counted per method.

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// rpcMutates classifies every RPC: true when it must be audited.
var rpcMutates = map[string]bool{
	"Worker.RegisterWorker": true, "Worker.Heartbeat": true, "Worker.Acquire": true, "Worker.Start": true,
	"Worker.RenewLease": true, "Worker.Complete": true, "Worker.CompleteMany": true, "Worker.Fail": true,
	"Worker.Deregister": true,
	"Producer.Enqueue":  true, "Producer.EnqueueMany": true, "Producer.Cancel": true, "Producer.GetTask": false, "Producer.ListTasks": false,
	"Producer.ScanProgress": false, "Producer.AggregateResults": false, "Producer.Retry": true,
	"Producer.ListScans": false, "Producer.FollowResults": false, "Producer.DeleteScan": true, "Producer.PurgeTasks": true,
	"Producer.CancelScan": true, "Dashboard.Overview": false,
	"Admin.UpdateTenant": true,
	"Admin.Status":       false, "Admin.ListWorkers": false, "Admin.CreateTenant": true, "Admin.CreateKey": true,
	"Admin.ListKeys": false, "Admin.RevokeKey": true, "Admin.RotateKey": true,
	"Producer.UpdateScan": true, "Admin.SetSchedulingOptions": true,
	"Producer.CreateSchedule": true, "Producer.ListSchedules": false, "Producer.DeleteSchedule": true,
	"Cluster.Join": true, "Cluster.Members": false, "Cluster.RemoveMember": true, "Cluster.TransferLeadership": true,
	// NB: a read, but audited all the same (it exports every key hash):
	// TestServer_Backup counts its line.
	"Cluster.Backup": false,
	// NB: a stream; each of its messages is audited as the unary call it
	// carries (TestSession_BadInputAsUnary counts the lines).
	"Worker.Session": false,
	// NB: the same for a producer session (TestProducerSession_AuditedAsUnary).
	"Producer.Session": false,
}

func TestServer_EveryMutatingRPCAuditedOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	var methods []protoreflect.MethodDescriptor
	for _, fd := range []protoreflect.FileDescriptor{pb.File_termivar_v1_api_proto, pb.File_termivar_v1_cluster_proto, pb.File_termivar_v1_dashboard_proto} {
		for i := range fd.Services().Len() {
			svc := fd.Services().Get(i)
			for j := range svc.Methods().Len() {
				methods = append(methods, svc.Methods().Get(j))
			}
		}
	}
	seen := map[string]bool{}
	for _, m := range methods {
		name := string(m.Parent().Name()) + "." + string(m.Name())
		seen[name] = true
		if _, ok := rpcMutates[name]; !ok {
			t.Errorf("RPC %s is not classified as mutating or read in rpcMutates", name)
			continue
		}
		if m.IsStreamingServer() || m.IsStreamingClient() {
			if rpcMutates[name] {
				t.Errorf("streaming RPC %s is classified as mutating; this test calls only unary RPCs", name)
			}
			continue
		}
		postEmpty(t, b, "/"+string(m.Parent().FullName())+"/"+string(m.Name()))
	}
	for name := range rpcMutates {
		if !seen[name] {
			t.Errorf("rpcMutates lists %s, which no service has", name)
		}
	}
	counts := auditCounts(t, b.auditLog)
	for name, mutates := range rpcMutates {
		want := 0
		if mutates {
			want = 1
		}
		if counts[name] != want {
			t.Errorf("audit lines for %s = %d, want %d", name, counts[name], want)
		}
	}
}

// postEmpty calls a unary RPC with an empty JSON message and the admin key.
func postEmpty(t *testing.T, b *testBundle, path string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, b.srv.URL+path, strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+b.adminKey)
	resp, err := b.srv.Client().Do(req)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	resp.Body.Close()
}

// auditCounts counts the audit lines per method.
func auditCounts(t *testing.T, path string) map[string]int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var line struct {
			Method string `json:"method"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		out[line.Method]++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
