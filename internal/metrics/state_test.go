// Goal: the scan label stays bounded: only the N most recent scans get
// series, ranked by their newest task, ties by scan ID. Method: recentScans
// over hand-made counts.
package metrics

import (
	"slices"
	"strconv"
	"testing"

	distributed "github.com/termivar/distributed"
)

func TestRecentScans_BoundedAndOrdered(t *testing.T) {
	m := map[string]*scanCounts{
		"old": {id: "old", newest: 10}, "new": {id: "new", newest: 30},
		"mid-b": {id: "mid-b", newest: 20}, "mid-a": {id: "mid-a", newest: 20},
	}
	for _, c := range []struct {
		n    int
		want []string
	}{
		{1, []string{"new"}},
		{3, []string{"new", "mid-a", "mid-b"}},
		{10, []string{"new", "mid-a", "mid-b", "old"}},
	} {
		var got []string
		for _, s := range recentScans(m, c.n) {
			got = append(got, s.id)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("recentScans(n=%d) = %v, want %v", c.n, got, c.want)
		}
	}
}

func TestNewStateCollector_ClampsRecentScans(t *testing.T) {
	for _, c := range []struct{ in, want int }{{0, DefaultRecentScans}, {-3, DefaultRecentScans}, {5, 5}, {1000, MaxRecentScans}} {
		sc := NewStateCollector(StateSource{}, StateConfig{RecentScans: c.in}).(*stateCollector)
		if sc.recent != c.want {
			t.Errorf("RecentScans %d -> %d, want %d", c.in, sc.recent, c.want)
		}
	}
}

// TestReasonClass: the agent's reasons fall in their classes, anything
// else is other, no reason none — and every class is a listed label value.
func TestReasonClass(t *testing.T) {
	for r, want := range map[string]string{
		"exit status 3; stderr: boom": "exit", "signal: killed": "signal",
		"timeout: killed after 5m0s": "timeout", "output exceeds the result limit of 10 bytes": "output_too_large",
		"handler error: dial": "handler", "scanner says no": "other", "": "none",
	} {
		got := reasonClass(r)
		if got != want {
			t.Errorf("reasonClass(%q) = %s, want %s", r, got, want)
		}
		if !slices.Contains(reasonClasses[:], got) {
			t.Errorf("class %s is not in reasonClasses", got)
		}
	}
}

// TestCountTasks_Scheduled: a queued task whose not-before time is after
// now is scheduled; at or after it, it is not; a task without one never is.
func TestCountTasks_Scheduled(t *testing.T) {
	q := distributed.NewWorkerPool().TaskQueue()
	for i, nb := range []uint64{0, 200, 500} {
		spec := distributed.TaskSpec{TaskID: "t" + strconv.Itoa(i), ScanID: "s", TargetRef: "x",
			Scheduling: distributed.TaskScheduling{NotBeforeSecs: nb}}
		if _, err := q.Enqueue(uint64(i), 100, spec); err != nil {
			t.Fatal(err)
		}
	}
	for now, want := range map[uint64]int{100: 2, 200: 1, 499: 1, 500: 0} {
		if got := countTasks(q.Tasks(), now).scheduled; got != want {
			t.Errorf("scheduled at %d = %d, want %d", now, got, want)
		}
	}
}
