package client

import (
	"net/url"
	"strings"
	"testing"

	"github.com/termivar/distributed/client/clienttest"
)

// TestSessions_BoundToNodeNotPointer: a try whose target names the
// session's node keeps the session, even when the target is another
// *url.URL of the same value (a leader hint parsed again: router.follow);
// a try to another node closes it and opens one there (C4).
func TestSessions_BoundToNodeNotPointer(t *testing.T) {
	srv, err := clienttest.New(clienttest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	c, err := New(Config{ServerURL: srv.URL, Key: srv.Key, WorkerSession: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	parse := func(s string) *url.URL {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	first := c.sess.get(parse(srv.URL))
	if again := c.sess.get(parse(srv.URL)); again != first {
		t.Fatal("a target equal to the session's node, as another *url.URL, opened a new session")
	}
	other := parse(strings.Replace(srv.URL, "127.0.0.1", "localhost", 1))
	if second := c.sess.get(other); second == first || second.target != other || !first.broken() {
		t.Fatalf("a target on another node: same session %v, target %v, old one closed %v", second == first, second.target, first.broken())
	}
}
