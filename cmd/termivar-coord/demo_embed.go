package main

import (
	"context"

	"github.com/termivar/distributed/client/clienttest"
)

// embeddedNode is a node serving the API on a loopback port.
type embeddedNode struct {
	URL, Key string
	close    func()
}

// Close stops the node.
func (e *embeddedNode) Close() { e.close() }

// startEmbedded starts a node on dir serving the API on a free loopback
// port.
//
// TODO(cli): this stand-in serves the in-memory clienttest node until the
// node branch's Connect server lands; then it opens node.Open on dir and
// serves its handlers.
func startEmbedded(_ context.Context, _ string) (*embeddedNode, error) {
	srv, err := clienttest.New(clienttest.Options{})
	if err != nil {
		return nil, err
	}
	return &embeddedNode{URL: srv.URL, Key: "demo", close: srv.Close}, nil
}
