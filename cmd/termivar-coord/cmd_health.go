package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

// This file holds `health`, the probe a container's HEALTHCHECK or a
// supervisor runs (the image has no shell and no curl): one GET of the
// node's /healthz (liveness) or, with --ready, /readyz (the node can
// commit and knows its leader; docs/node.md, "Log integrity"). No API key:
// both endpoints are unauthenticated. Exit 0 when the node answers 200, 2
// when it answers anything else, 3 when it cannot be reached, 1 on bad
// flags.

const healthUsage = `usage: termivar-coord health [--url URL] [--ready] [--timeout D] [--ca-file F --cert-file F --key-file F]`

// healthFlags are the flags of the health command.
type healthFlags struct {
	url     string
	ready   bool
	timeout time.Duration
	tls     tlsFlags
}

// newHealthFlagSet returns the health command's flag set bound to h.
func newHealthFlagSet(h *healthFlags, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("health", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&h.url, "url", "http://127.0.0.1:7420", "the node's API base URL")
	fs.BoolVar(&h.ready, "ready", false, "probe /readyz (can commit, knows the leader) instead of /healthz (alive)")
	fs.DurationVar(&h.timeout, "timeout", 3*time.Second, "give up after this long")
	h.tls.register(fs, tlsFromEnv())
	fs.Usage = func() {
		fmt.Fprintln(stderr, healthUsage)
		fs.PrintDefaults()
	}
	return fs
}

func runHealth(args []string) int { return runHealthTo(args, os.Stdout, os.Stderr) }

// runHealthTo probes the node and prints its one-line answer.
func runHealthTo(args []string, stdout, stderr io.Writer) int {
	var h healthFlags
	fs := newHealthFlagSet(&h, stderr)
	if err := fs.Parse(args); err != nil {
		return flagExit(err)
	}
	if fs.NArg() > 0 || h.timeout <= 0 {
		fmt.Fprintln(stderr, healthUsage)
		return exitUsage
	}
	hc, err := h.tls.httpClient(h.url)
	if err != nil {
		fmt.Fprintln(stderr, "termivar-coord health:", err)
		return exitUsage
	}
	hc = cmp.Or(hc, &http.Client{})
	path := "/healthz"
	if h.ready {
		path = "/readyz"
	}
	ctx, cancel := context.WithTimeout(context.Background(), h.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(h.url, "/")+path, nil)
	if err != nil {
		fmt.Fprintln(stderr, "termivar-coord health:", err)
		return exitUsage
	}
	res, err := hc.Do(req)
	if err != nil {
		fmt.Fprintln(stderr, "termivar-coord health: unreachable:", err)
		return exitUnreachable
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(res.Body, 512))
	msg := strings.TrimSpace(string(body))
	if res.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "termivar-coord health: %s answered %d %s\n", path, res.StatusCode, msg)
		return exitRejected
	}
	fmt.Fprintln(stdout, msg)
	return exitOK
}
