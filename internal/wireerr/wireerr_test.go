// Goal: every core error survives Encode → protobuf bytes → Decode equal
// in kind and every detail field. Method: for every kind, an error with
// every field of distributed.Error set to a distinct non-zero value (found
// by reflection, so a field added to Error without a wire field fails
// here), and one with every field zero; then the refusals of Decode.
package wireerr

import (
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// filled returns an error of kind k with every other field non-zero and
// distinct from its neighbours.
func filled(t *testing.T, k distributed.ErrorKind) distributed.Error {
	t.Helper()
	var e distributed.Error
	v := reflect.ValueOf(&e).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		switch {
		case v.Type().Field(i).Name == "Kind":
			f.Set(reflect.ValueOf(k))
		case v.Type().Field(i).Name == "Status":
			f.Set(reflect.ValueOf(distributed.TaskExpired))
		case f.Kind() == reflect.String:
			f.SetString("v" + v.Type().Field(i).Name)
		case f.Kind() == reflect.Uint64:
			f.SetUint(uint64(1000 + i))
		default:
			t.Fatalf("distributed.Error.%s has type %s, which this test and Encode do not know", v.Type().Field(i).Name, f.Type())
		}
	}
	return e
}

func roundTrip(t *testing.T, in distributed.Error) distributed.Error {
	t.Helper()
	b, err := proto.Marshal(Encode(&in))
	if err != nil {
		t.Fatal(err)
	}
	var d pb.ErrorDetail
	if err := proto.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	out, ok := Decode(&d)
	if !ok {
		t.Fatalf("Decode(Encode(%+v)) refused", in)
	}
	return *out
}

func TestWireerr_RoundTripEveryKindEveryField(t *testing.T) {
	for _, k := range distributed.AllErrorKinds() {
		t.Run(k.String(), func(t *testing.T) {
			full := filled(t, k)
			if got := roundTrip(t, full); got != full {
				t.Errorf("round trip = %+v, want %+v", got, full)
			}
			zero := distributed.Error{Kind: k}
			if got := roundTrip(t, zero); got != zero {
				t.Errorf("round trip = %+v, want %+v", got, zero)
			}
		})
	}
}

func TestWireerr_StatusOnlyWhenItSaysSomething(t *testing.T) {
	if d := Encode(&distributed.Error{Kind: distributed.KindTaskNotFound}); d.GetStatus() != "" {
		t.Errorf("task_not_found detail has status %q, want none", d.GetStatus())
	}
	d := Encode(&distributed.Error{Kind: distributed.KindTaskNotQueued, Status: distributed.TaskQueued})
	if d.GetStatus() != "queued" {
		t.Errorf("task_not_queued detail status = %q, want queued", d.GetStatus())
	}
}

func TestWireerr_DecodeRefuses(t *testing.T) {
	for _, d := range []*pb.ErrorDetail{
		{Kind: "not_leader"},
		{Kind: "key_not_found"},
		{Kind: ""},
		{Kind: "invalid_transition", Status: "sleeping"},
	} {
		if e, ok := Decode(d); ok {
			t.Errorf("Decode(%v) = %+v, want refusal", d, e)
		}
	}
}
