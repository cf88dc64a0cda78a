package wire

// Goal: the wire mapping of limits is lossless for valid limits, nil
// means the defaults, and invalid wire limits are refused. Method:
// round-trips and one invalid message.

import (
	"testing"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

func TestLimits_RoundTrip(t *testing.T) {
	t.Parallel()
	lim := distributed.DefaultLimits()
	lim.MaxRetries, lim.MaxWorkers = 2, 7
	if got, err := LimitsFromProto(LimitsToProto(lim)); err != nil || got != lim {
		t.Errorf("LimitsFromProto(LimitsToProto(%+v)) = %+v, %v", lim, got, err)
	}
	rl := distributed.DefaultResultLimits()
	rl.MaxResultBytes = 16
	if got, err := ResultLimitsFromProto(ResultLimitsToProto(rl)); err != nil || got != rl {
		t.Errorf("ResultLimitsFromProto(ResultLimitsToProto(%+v)) = %+v, %v", rl, got, err)
	}
	if got, err := LimitsFromProto(nil); err != nil || got != distributed.DefaultLimits() {
		t.Errorf("LimitsFromProto(nil) = %+v, %v, want the defaults", got, err)
	}
	if got, err := ResultLimitsFromProto(nil); err != nil || got != distributed.DefaultResultLimits() {
		t.Errorf("ResultLimitsFromProto(nil) = %+v, %v, want the defaults", got, err)
	}
	if _, err := LimitsFromProto(&pb.CoreLimits{}); err == nil {
		t.Error("LimitsFromProto(all zero) = nil error, want the core's validation error")
	}
}
