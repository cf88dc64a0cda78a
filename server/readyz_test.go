// Test of /readyz on a node that cannot commit. Goal: while the raft log
// store fails its writes (here a really full disk), /readyz answers 503
// "cannot commit" instead of ok. Method: the node's data dir on a small
// tmpfs (needs root and mount rights; skipped otherwise), filled until a
// proposal fails.
package server

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/node"
)

func getReadyz(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestServer_ReadyzCannotCommit(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping the tmpfs disk-full test")
	}
	mnt := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=72m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs (needs root and mount rights): %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", mnt).Run() })
	b := setup(t, func(c *node.Config) { c.DataDir = filepath.Join(mnt, "data") })
	if code, body := getReadyz(t, b.srv.URL); code != http.StatusOK {
		t.Fatalf("/readyz on a healthy node = %d %q", code, body)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(mnt, &st); err != nil {
		t.Fatal(err)
	}
	if free := int64(st.Bavail)*st.Bsize - 2<<20; free > 0 {
		if err := os.WriteFile(filepath.Join(mnt, "filler"), make([]byte, free), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	pad := make([]byte, 256<<10)
	for i := 0; ; i++ {
		if i > 1000 {
			t.Fatal("proposals kept succeeding on a full disk")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := b.node.Propose(ctx, &pb.Command{Tenant: "no-such-tenant", Op: &pb.Command_Enqueue{Enqueue: &pb.EnqueueTasks{
			Tasks: []*pb.TaskSpec{{TaskId: "pad", ScanId: "s", TargetRef: pad}}}}})
		cancel()
		if err != nil {
			break
		}
	}
	code, body := getReadyz(t, b.srv.URL)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "cannot commit") {
		t.Fatalf("/readyz with a full disk = %d %q, want 503 cannot commit", code, body)
	}
	t.Logf("/readyz: %d %s", code, strings.TrimSpace(body))
}
