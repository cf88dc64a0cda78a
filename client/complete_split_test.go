package client

// Goal: splitCompleteMany cuts a request into runs of consecutive items,
// in order, each within the bound (an item above it alone), about equal
// in size, and leaves whole what it must not split (it fits, or has an
// item count the server refuses, or splitting is off). Method: table of
// item sizes; the parts' items are compared with the request's.

import (
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/termivar/distributed/gen/termivar/v1"
)

func completeManyOf(sizes ...int) *pb.CompleteManyRequest {
	req := &pb.CompleteManyRequest{}
	for _, n := range sizes {
		req.Items = append(req.Items, &pb.CompleteRequest{LeaseToken: []byte("lease"), Result: make([]byte, n)})
	}
	return req
}

func TestSplitCompleteMany(t *testing.T) {
	t.Parallel()
	const kib = 1 << 10
	same := func(n, size int) []int { return slices.Repeat([]int{size}, n) }
	cases := []struct {
		name     string
		sizes    []int
		maxBytes int
		want     []int // items per part
	}{
		{"fits", same(10, 10*kib), 1 << 20, []int{10}},
		{"128 × 64 KiB at 1 MiB less a page: equal shares", same(128, 64*kib), DefaultCompleteManyCallBytes, []int{15, 14, 14, 14, 15, 14, 14, 14, 14}},
		{"three shares", same(9, 100*kib), 400 * kib, []int{3, 3, 3}},
		{"an item above the bound goes alone", []int{10 * kib, 900 * kib, 10 * kib}, 100 * kib, []int{1, 1, 1}},
		{"off", same(128, 64*kib), -1, []int{128}},
		{"one item", []int{4 << 20}, 1 << 20, []int{1}},
		{"no items", nil, 1 << 20, []int{0}},
		{"more items than the server takes", same(MaxCompleteManyItems+1, 2*kib), 1 << 20, []int{MaxCompleteManyItems + 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := completeManyOf(c.sizes...)
			parts := splitCompleteMany(req, c.maxBytes)
			var got []int
			var joined []*pb.CompleteRequest
			for _, p := range parts {
				got = append(got, len(p.GetItems()))
				joined = append(joined, p.GetItems()...)
				if len(parts) > 1 && len(p.GetItems()) > 1 && proto.Size(p) > c.maxBytes {
					t.Errorf("a part of %d items is %d bytes, above the bound %d", len(p.GetItems()), proto.Size(p), c.maxBytes)
				}
			}
			if !slices.Equal(got, c.want) {
				t.Fatalf("splitCompleteMany(%s) = parts of %v items, want %v", c.name, got, c.want)
			}
			if len(req.GetItems()) > 0 && !slices.Equal(joined, req.GetItems()) {
				t.Fatalf("splitCompleteMany(%s): the parts' items are not the request's, in order", c.name)
			}
		})
	}
}

// acquireCompleting copies every field of AcquireRequest but complete: a
// request with every field set comes back equal with complete replaced,
// and the test fails when AcquireRequest gains a field (set it below and
// copy it in acquireCompleting).
func TestAcquireCompleting_CopiesEveryField(t *testing.T) {
	t.Parallel()
	req := &pb.AcquireRequest{WorkerId: "w1", LeaseTtlSecs: 30, WaitSecs: 5, MaxTasks: 7, Start: true,
		Complete: completeManyOf(10, 20).GetItems()}
	fields := req.ProtoReflect().Descriptor().Fields()
	for i := range fields.Len() {
		if f := fields.Get(i); !req.ProtoReflect().Has(f) {
			t.Errorf("AcquireRequest.%s is not set in this test (and perhaps not copied by acquireCompleting)", f.Name())
		}
	}
	part := req.GetComplete()[1:]
	got := acquireCompleting(req, part)
	want := proto.CloneOf(req)
	want.Complete = part
	if !proto.Equal(got, want) {
		t.Fatalf("acquireCompleting(req, part) = %v, want %v", got, want)
	}
}
