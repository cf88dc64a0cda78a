// Goal: `workers` shows the declared and the effective capacity and why
// they differ. Method: two workers registered through the API, one that
// reports no utilization (the agent's default) and one that reports 75 %
// CPU (as with --adaptive-capacity); the table and the JSON must say so.
package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	pb "github.com/termivar/distributed/gen/termivar/v1"
)

func TestCLI_WorkersShowEffectiveCapacity(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.cliClient(t, "")
	for _, r := range []*pb.RegisterWorkerRequest{{WorkerId: "plain", Capacity: 4}, {WorkerId: "adaptive", Capacity: 4, CpuBasisPoints: 7500, MemoryBasisPoints: 1000}} {
		if _, err := c.RegisterWorker(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	code, out, stderr := b.run(t, "", "workers")
	if code != exitOK {
		t.Fatalf("workers: exit %d: %s", code, stderr)
	}
	rows := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
		rows[strings.Fields(l)[0]] = l
	}
	if !strings.Contains(rows["adaptive"], " 0/1 ") || !strings.Contains(rows["adaptive"], "4, scaled to 1 by cpu 75.0% (--adaptive-capacity)") {
		t.Errorf("adaptive row = %q", rows["adaptive"])
	}
	if !strings.Contains(rows["plain"], " 0/4 ") || strings.Contains(rows["plain"], "scaled") {
		t.Errorf("plain row = %q", rows["plain"])
	}
	code, out, _ = b.run(t, "", "workers", "--json")
	got := map[string]workerJSON{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var w workerJSON
		if err := json.Unmarshal([]byte(l), &w); err != nil {
			t.Fatal(err)
		}
		got[w.WorkerID] = w
	}
	if a, p := got["adaptive"], got["plain"]; code != exitOK || a.Capacity != 4 || a.EffectiveCapacity != 1 || a.CapacityScaledBy != "cpu" ||
		p.EffectiveCapacity != 4 || p.CapacityScaledBy != "" {
		t.Fatalf("workers --json: exit %d, %+v", code, got)
	}
}
