package raftfsm

// Goal: a response value of an unexpected type is an error naming the
// operation, never a panic. Method: ValueAs on matching and mismatching
// values.

import (
	"strings"
	"testing"

	distributed "github.com/termivar/distributed"
)

func TestValueAs(t *testing.T) {
	t.Parallel()
	want := distributed.RecoverySummary{TasksRequeued: 3}
	got, err := ValueAs[distributed.RecoverySummary](Response{Value: want}, "DeregisterWorker")
	if err != nil || got != want {
		t.Fatalf("ValueAs(match) = %+v, %v, want %+v, nil", got, err, want)
	}
	for _, v := range []any{nil, "x", []Acquired{}} {
		_, err := ValueAs[distributed.RecoverySummary](Response{Value: v}, "DeregisterWorker")
		if err == nil || !strings.Contains(err.Error(), "DeregisterWorker") {
			t.Errorf("ValueAs(%T) error = %v, want one naming DeregisterWorker", v, err)
		}
	}
}
