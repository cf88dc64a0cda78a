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

// TestRouter_SkipPassesOverSuspects checks that moving on passes over a
// node that recently left a try unanswered (a paused node), unless every
// node is suspect or the node answered since.
func TestRouter_SkipPassesOverSuspects(t *testing.T) {
	t.Parallel()
	urls, err := parseServerURLs("http://a:1,http://b:1,http://c:1")
	if err != nil {
		t.Fatal(err)
	}
	r := &router{urls: urls}
	a, b, c := urls[0], urls[1], urls[2]
	r.skip(a) // a paused: on to b
	r.skip(b) // b timed out too: on to c
	r.answered(b)
	r.skip(c)
	if got := r.target().Host; got != "b:1" {
		t.Fatalf("target = %s, want b:1 (a is suspect, b answered since)", got)
	}
	r.skip(b) // now a, b and c are all suspect: the next one, c
	if got := r.target().Host; got != "c:1" {
		t.Errorf("target with every node suspect = %s, want c:1", got)
	}
}

// TestRouter_IgnoresHintNamingSuspect checks that a leader hint naming a
// node that just left a try unanswered (a stale view of a paused leader)
// does not route back to it, while a hint naming another node is followed.
func TestRouter_IgnoresHintNamingSuspect(t *testing.T) {
	t.Parallel()
	urls, err := parseServerURLs("http://a:1,http://b:1,http://c:1")
	if err != nil {
		t.Fatal(err)
	}
	r := &router{urls: urls}
	r.skip(urls[0])
	r.follow(&url.URL{Scheme: "http", Host: "a:1"})
	if got := r.target().Host; got != "b:1" {
		t.Fatalf("target after a hint naming the suspect a = %s, want b:1", got)
	}
	r.follow(&url.URL{Scheme: "http", Host: "c:1"})
	if got := r.target().Host; got != "c:1" {
		t.Errorf("target after a hint naming c = %s, want c:1", got)
	}
}
