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
	"github.com/termivar/distributed/internal/audit"
	"github.com/termivar/distributed/node"
	"github.com/termivar/distributed/server"
)

// embeddedNode is a one-voter node serving the API on a loopback port, for
// the demo and bench.
type embeddedNode struct {
	URL, Key string
	// HTTPClient carries the demo's calls (nil: the client's default).
	HTTPClient *http.Client
	close      func()
}

// Close stops the HTTP server and the node.
func (e *embeddedNode) Close() { e.close() }

// startEmbedded opens a node with cfg (its raft address on loopback),
// makes its admin key and serves the API on a free loopback port — over
// mutual TLS when mtls is set, with the audit log in the data dir when
// withAudit is.
func startEmbedded(ctx context.Context, cfg node.Config, mtls *demoTLS, withAudit bool) (_ *embeddedNode, err error) {
	n, err := node.Open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	var al *audit.Logger
	defer func() {
		if err != nil {
			n.Close()
			al.Close()
		}
	}()
	keyPath := filepath.Join(cfg.DataDir, node.AdminKeyFile)
	if _, err := server.EnsureAdminKey(ctx, n, keyPath); err != nil {
		return nil, err
	}
	key, err := client.LoadKey(keyPath)
	if err != nil {
		return nil, err
	}
	if withAudit {
		if al, err = audit.Open(filepath.Join(cfg.DataDir, audit.FileName), nil); err != nil {
			return nil, err
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	hs := server.New(server.Config{Backend: n, Audit: al}).HTTPServer(l.Addr().String())
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
		al.Close()
	}}, nil
}
