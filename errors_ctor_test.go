// Goal: the exported constructors and validators the shells use build the
// same *Error the core's own commands return, and never copy an invalid
// identifier into an error. Method: compare each with the error of the
// corresponding core call where one exists, and with explicit values.
package distributed

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckTaskCommandID(t *testing.T) {
	if err := CheckTaskCommandID("scan-1"); err != nil {
		t.Fatalf("CheckTaskCommandID(valid) = %v, want nil", err)
	}
	for _, id := range []string{"", "a b", strings.Repeat("x", MaxIdentifierBytes+1)} {
		err := CheckTaskCommandID(id)
		var e *Error
		if !errors.As(err, &e) || *e != *invalidTaskID() {
			t.Errorf("CheckTaskCommandID(%q) = %v, want %v", id, err, invalidTaskID())
		}
	}
}

func TestNewTaskNotFoundError(t *testing.T) {
	if got, want := *NewTaskNotFoundError("t1"), (Error{Kind: KindTaskNotFound, TaskID: "t1"}); got != want {
		t.Errorf("NewTaskNotFoundError(t1) = %+v, want %+v", got, want)
	}
	if got := *NewTaskNotFoundError("bad id"); got != *invalidTaskID() {
		t.Errorf("NewTaskNotFoundError(invalid) = %+v, want %+v", got, *invalidTaskID())
	}
}

func TestNewInvalidSpecErrors(t *testing.T) {
	if got, want := *NewInvalidTaskError("r"), (Error{Kind: KindInvalidTask, Reason: "r"}); got != want {
		t.Errorf("NewInvalidTaskError = %+v, want %+v", got, want)
	}
	if got, want := *NewInvalidWorkerError("r"), (Error{Kind: KindInvalidWorker, Reason: "r"}); got != want {
		t.Errorf("NewInvalidWorkerError = %+v, want %+v", got, want)
	}
}
