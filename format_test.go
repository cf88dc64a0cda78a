package distributed

// Goal: targets never appear in any formatted form (contract A.1), while getters
// return them; error messages never echo invalid identifiers.

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

const secretTarget = "SECRET-TARGET-10.9.8.7"

func TestRedaction_EveryVerb(t *testing.T) {
	h := newHarness(t, DefaultLimits())
	h.register("w", 2)
	spec := TaskSpec{TaskID: "t1", ScanID: "s", TargetRef: secretTarget, Phases: []uint8{1}}
	var task ScanTask
	h.ok("enqueue", func(rev, now uint64) error {
		tr, err := h.p.Enqueue(rev, now, spec)
		task = tr.Value
		return err
	})
	if task.TargetRef() != secretTarget || h.task("t1").TargetRef() != secretTarget {
		t.Fatal("getter does not return the real target")
	}
	values := map[string]any{
		"spec": spec, "spec ptr": &spec, "task": task, "task ptr": &task, "tasks": h.p.Tasks(),
		"pool": h.p, "queue": h.p.TaskQueue(), "transition": Transition[ScanTask]{Revision: 1, Value: task},
		"specs": []TaskSpec{spec}, "nested": map[string]any{"s": spec, "t": []ScanTask{task}},
		"results": []AggregatedResult{{TaskID: "t1", Result: []byte(secretTarget)}},
	}
	for name, v := range values {
		for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d"} {
			if out := fmt.Sprintf(verb, v); strings.Contains(out, secretTarget) || strings.Contains(out, fmt.Sprintf("%x", secretTarget)) {
				t.Errorf("%s formatted with %s leaks the target: %s", name, verb, out)
			}
		}
		var buf bytes.Buffer
		slog.New(slog.NewJSONHandler(&buf, nil)).Info("x", "v", v)
		slog.New(slog.NewTextHandler(&buf, nil)).Info("x", "v", v)
		b64 := base64.StdEncoding.EncodeToString([]byte(secretTarget))[:16]
		if strings.Contains(buf.String(), b64) {
			t.Errorf("%s logged with slog leaks the base64 target: %s", name, buf.String())
		}
		if js, err := json.Marshal(v); err == nil && (strings.Contains(string(js), secretTarget) || strings.Contains(string(js), b64)) {
			t.Errorf("%s JSON-encoded leaks the target: %s", name, js)
		}
		if strings.Contains(buf.String(), secretTarget) {
			t.Errorf("%s logged with slog leaks the target: %s", name, buf.String())
		}
	}
	if s := fmt.Sprint(task); !strings.Contains(s, "<redacted>") || !strings.Contains(s, "t1") {
		t.Errorf("task string %q lacks the redaction marker or the ID", s)
	}
}

func TestRedaction_ErrorsNeverEchoInvalidInput(t *testing.T) {
	h := newHarness(t, DefaultLimits())
	hostile := "evil\x00<script>" + secretTarget
	calls := []func(rev, now uint64) error{
		func(rev, now uint64) error {
			_, err := h.p.Enqueue(rev, now, TaskSpec{TaskID: hostile, ScanID: "s", TargetRef: "x"})
			return err
		},
		func(rev, now uint64) error {
			_, err := h.p.Enqueue(rev, now, TaskSpec{TaskID: "t", ScanID: hostile, TargetRef: "x"})
			return err
		},
		func(rev, now uint64) error {
			_, err := h.p.Enqueue(rev, now, TaskSpec{TaskID: "t", ScanID: "s", TargetRef: strings.Repeat(secretTarget, 100)})
			return err
		},
		func(rev, now uint64) error { _, err := h.p.AssignTask(rev, now, hostile, "w", 10); return err },
		func(rev, now uint64) error { _, err := h.p.AssignNext(rev, now, hostile, 10); return err },
		func(rev, now uint64) error {
			_, err := h.p.RegisterWorker(rev, now, WorkerSpec{WorkerID: hostile, Capacity: 1})
			return err
		},
		func(rev, now uint64) error { _, err := h.p.DeregisterWorker(rev, now, hostile, 1); return err },
		func(rev, now uint64) error { _, _, err := h.p.GetTask(hostile); return err },
		func(rev, now uint64) error { _, _, err := h.p.GetWorker(hostile); return err },
	}
	for i, f := range calls {
		err := f(h.rev(), h.now)
		if err == nil {
			t.Fatalf("call %d accepted hostile input", i)
		}
		if msg := err.Error(); strings.Contains(msg, "evil") || strings.Contains(msg, secretTarget) {
			t.Fatalf("call %d error echoes input: %s", i, msg)
		}
		if s := fmt.Sprintf("%+v %#v", err, err); strings.Contains(s, "evil") || strings.Contains(s, secretTarget) {
			t.Fatalf("call %d error formatting echoes input: %s", i, s)
		}
	}
}
