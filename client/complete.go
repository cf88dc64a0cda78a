package client

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// DefaultCompleteManyCallBytes is Config.CompleteManyCallBytes' default:
// 1 MiB less a page. NB: Connect reads a request into a buffer it doubles
// from 512 B and keeps for the next request only up to 8 MiB (the client
// marshals into a pooled buffer with the same bound). A 128 × 64 KiB
// CompleteMany (8.4 MB) got a new 16 MiB buffer on the server per call —
// 3.8× the results allocated, and cleared — where a call below this bound
// reuses a 1 MiB one; and the server holds one call's results (decoded,
// then in the log entry) per worker at a time, not the whole batch. Calls
// of 4 MiB less a page measured 1.4× the peak RSS of 1 MiB ones (issue 15;
// docs/benchmarks.md, "64 KiB results").
const DefaultCompleteManyCallBytes = 1<<20 - 4<<10

// MaxCompleteManyItems is the server's bound on the items of one
// CompleteMany request (server.MaxCompleteMany). A request outside 1 to
// MaxCompleteManyItems items is sent whole, so the server refuses it as
// before.
const MaxCompleteManyItems = 1024

// CompleteMany completes several tasks; each item succeeds or fails alone.
//
// A request larger than Config.CompleteManyCallBytes (with 2 to
// MaxCompleteManyItems items) is sent as several calls, one after the
// other, each of consecutive items adding up to about an equal share of
// it and at most that bound (an item larger than the bound goes alone);
// the answers are joined in the request's order, one per item, exactly as
// one call answers. If a call fails, CompleteMany returns its error and no
// response: the items of the calls before it have been completed and
// stored (and those of the failed call may have been, as when one call
// fails), so sending the whole request again answers them
// already_completed with their receipts, as after a lost reply.
func (c *Client) CompleteMany(ctx context.Context, req *pb.CompleteManyRequest) (*pb.CompleteManyResponse, error) {
	parts := splitCompleteMany(req, c.cfg.CompleteManyCallBytes)
	if len(parts) == 1 {
		return call(ctx, c, "Worker.CompleteMany", req, c.completeManyRPC())
	}
	results, err := c.completeParts(ctx, parts, len(req.GetItems()))
	if err != nil {
		return nil, err
	}
	return &pb.CompleteManyResponse{Results: results}, nil
}

// completeParts sends each part as a CompleteMany call, in order, and
// returns their results joined; the first failed call ends it.
func (c *Client) completeParts(ctx context.Context, parts []*pb.CompleteManyRequest, items int) ([]*pb.CompleteItemResult, error) {
	out := make([]*pb.CompleteItemResult, 0, items)
	for _, part := range parts {
		res, err := call(ctx, c, "Worker.CompleteMany", part, c.completeManyRPC())
		if err != nil {
			return nil, err
		}
		if got, want := len(res.GetResults()), len(part.GetItems()); got != want {
			return nil, fmt.Errorf("client: Worker.CompleteMany answered %d results for %d items", got, want)
		}
		out = append(out, res.GetResults()...)
	}
	return out, nil
}

// acquireCompleting is req with complete in place of its completions.
// NB: field by field, not proto.Clone, which would copy every result;
// TestAcquireCompleting_CopiesEveryField fails when AcquireRequest gains
// a field this does not copy.
func acquireCompleting(req *pb.AcquireRequest, complete []*pb.CompleteRequest) *pb.AcquireRequest {
	return &pb.AcquireRequest{WorkerId: req.GetWorkerId(), LeaseTtlSecs: req.GetLeaseTtlSecs(), WaitSecs: req.GetWaitSecs(),
		MaxTasks: req.GetMaxTasks(), Start: req.GetStart(), Complete: complete}
}

// CompleteManyCalls returns how many calls CompleteMany makes for req when
// every call succeeds at its first try.
func (c *Client) CompleteManyCalls(req *pb.CompleteManyRequest) int {
	return len(splitCompleteMany(req, c.cfg.CompleteManyCallBytes))
}

// splitCompleteMany cuts req into the calls CompleteMany sends: req itself
// when it fits maxBytes (or is not to be split), else runs of consecutive
// items, in order, each at most maxBytes and about total/calls bytes.
func splitCompleteMany(req *pb.CompleteManyRequest, maxBytes int) []*pb.CompleteManyRequest {
	items := req.GetItems()
	if maxBytes <= 0 || len(items) < 2 || len(items) > MaxCompleteManyItems {
		return []*pb.CompleteManyRequest{req}
	}
	sizes := make([]int, len(items))
	total := 0
	for i, it := range items {
		sizes[i] = protowire.SizeTag(1) + protowire.SizeBytes(proto.Size(it))
		total += sizes[i]
	}
	if total <= maxBytes {
		return []*pb.CompleteManyRequest{req}
	}
	calls := (total + maxBytes - 1) / maxBytes
	share := (total + calls - 1) / calls
	var parts []*pb.CompleteManyRequest
	start, size, before := 0, 0, 0 // before: the bytes of items[:i]
	for i, n := range sizes {
		// NB: a part ends where the request's running total reaches the
		// next multiple of share, so rounding does not pile up in the last.
		if i > start && (size+n > maxBytes || before >= share*(len(parts)+1)) {
			parts = append(parts, &pb.CompleteManyRequest{Items: items[start:i]})
			start, size = i, 0
		}
		size += n
		before += n
	}
	return append(parts, &pb.CompleteManyRequest{Items: items[start:]})
}
