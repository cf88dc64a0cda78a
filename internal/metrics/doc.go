// Package metrics holds the node's Prometheus metrics (docs/observability.md):
// a registry with the Go runtime and process collectors, a collector that
// reads the applied state at scrape time (state.go), the node's raft
// instruments (node.go), the API's (api.go) and the HTTP handler of the
// metrics listener (handler.go). Every instrument type is nil-safe: a nil
// *Node or *API records nothing, so the shells need no branches.
package metrics
