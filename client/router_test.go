package client

import (
	"net/url"
	"testing"
)

// TestRouter_Skip checks that many calls failing on the same node move the
// route once, and that a leader hint naming the failed node is dropped.
func TestRouter_Skip(t *testing.T) {
	t.Parallel()
	urls, err := parseServerURLs("http://a:1,http://b:1,http://c:1")
	if err != nil {
		t.Fatal(err)
	}
	r := &router{urls: urls}
	a := r.target()
	r.skip(a)
	r.skip(a) // a second, concurrent failure on a: no further move
	if got := r.target().Host; got != "b:1" {
		t.Fatalf("target after two failures on a = %s, want b:1", got)
	}
	r.leader = &url.URL{Scheme: "http", Host: "c:1"}
	r.skip(r.target())
	if got := r.target().Host; got != "b:1" {
		t.Errorf("target after the leader c failed = %s, want b:1 (hint dropped, b untouched)", got)
	}
}
