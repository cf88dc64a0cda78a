package server

import (
	"fmt"
	"testing"

	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/internal/apikey"
)

// BenchmarkServer_Overview measures building the dashboard's view of a
// tenant holding n queued tasks in 4 scans (docs/observability.md,
// "Dashboard": one pass over the tenant's records per view).
func BenchmarkServer_Overview(b *testing.B) {
	for _, n := range []int{1024, 16384} {
		b.Run(fmt.Sprintf("tasks=%d", n), func(b *testing.B) {
			bundle := setup(b, nil)
			bundle.createTenant(b, "big", &pb.CoreLimits{MaxTaskRecords: 65536, MaxActiveTasks: 16384, MaxQueuedTasks: 16384,
				MaxTerminalTasks: 65536, MaxWorkers: 16, MaxRetries: 3, MaxLeaseTtlSecs: 3600, MaxTaskTtlSecs: 86400, HeartbeatTimeoutSecs: 60}, nil)
			p := bundle.clients(bundle.createKey(b, "big", "producer"))
			for i := 0; i < n; i += 4096 {
				r := &pb.EnqueueRequest{}
				for j := i; j < min(n, i+4096); j++ {
					r.Tasks = append(r.Tasks, &pb.NewTask{TaskId: fmt.Sprintf("t%06d", j), ScanId: fmt.Sprintf("s%d", j%4), TargetRef: "x"})
				}
				if _, err := p.producer.Enqueue(ctx, req(r)); err != nil {
					b.Fatal(err)
				}
			}
			pr := principal{Tenant: "big", Role: apikey.RoleProducer}
			b.ReportAllocs()
			for b.Loop() {
				if v := bundle.api.overview(pr); v.GetTotals().GetQueued() != uint32(n) {
					b.Fatalf("queued = %d", v.GetTotals().GetQueued())
				}
			}
		})
	}
}
