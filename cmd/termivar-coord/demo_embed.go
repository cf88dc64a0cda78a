package main

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"github.com/termivar/distributed/client"
	"github.com/termivar/distributed/node"
	"github.com/termivar/distributed/server"
)

// embeddedNode is a one-voter node serving the API on a loopback port, for
// the demo.
type embeddedNode struct {
	URL, Key string
	// HTTPClient carries the demo's calls (nil: the client's default).
	HTTPClient *http.Client
	close      func()
}

// Close stops the HTTP server and the node.
func (e *embeddedNode) Close() { e.close() }

// startDemoNode opens a node on dir (raft and API on free loopback ports),
// makes its admin key and serves the API — over mutual TLS when mtls is set.
func startDemoNode(ctx context.Context, dir string, mtls *demoTLS) (*embeddedNode, error) {
	// NB: a quick recovery ticker so the crashed worker's expired leases go
	// back to the queue within a fraction of a second of expiring.
	n, err := node.Open(ctx, node.Config{DataDir: dir, RaftAddr: "127.0.0.1:0", TickInterval: 250 * time.Millisecond})
	if err != nil {
		return nil, err
	}
	keyPath := filepath.Join(dir, node.AdminKeyFile)
	if _, err := server.EnsureAdminKey(ctx, n, keyPath); err != nil {
		n.Close()
		return nil, err
	}
	key, err := client.LoadKey(keyPath)
	if err != nil {
		n.Close()
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		n.Close()
		return nil, err
	}
	hs := server.New(server.Config{Backend: n}).HTTPServer(l.Addr().String())
	url := "http://" + l.Addr().String()
	var hc *http.Client
	if mtls != nil {
		url, hc = "https://"+l.Addr().String(), mtls.client
		l = tls.NewListener(l, mtls.server)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		if err := hs.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = err // the demo notices through its client
		}
	}()
	return &embeddedNode{URL: url, Key: key, HTTPClient: hc, close: func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
		<-served
		n.Close()
	}}, nil
}
