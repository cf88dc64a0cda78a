// NewTransport's small connection buffers (TransportBufferBytes): a call
// whose response header line and body are many times a buffer's size
// goes through intact, and so does a request body that large.
package client_test

import (
	"bytes"
	"crypto/rand"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/termivar/distributed/client"
)

func TestNewTransport_SmallBuffers(t *testing.T) {
	t.Parallel()
	tr := client.NewTransport(nil, 4)
	if tr.ReadBufferSize != client.TransportBufferBytes || tr.WriteBufferSize != client.TransportBufferBytes {
		t.Fatalf("buffers %d/%d, want %d", tr.ReadBufferSize, tr.WriteBufferSize, client.TransportBufferBytes)
	}
	body := make([]byte, 200*client.TransportBufferBytes)
	if _, err := rand.Read(body); err != nil {
		t.Fatal(err)
	}
	header := strings.Repeat("h", 20*client.TransportBufferBytes)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, err := io.ReadAll(r.Body)
		if err != nil || !bytes.Equal(got, body) {
			http.Error(w, "request body changed", http.StatusBadRequest)
			return
		}
		w.Header().Set("X-Long", header)
		_, _ = w.Write(got)
	}))
	defer srv.Close()
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	for range 2 { // the second call reuses the connection
		res, err := hc.Post(srv.URL, "application/octet-stream", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil || res.StatusCode != http.StatusOK || res.Header.Get("X-Long") != header || !bytes.Equal(got, body) {
			t.Fatalf("status %d, header intact %v, body intact %v, err %v", res.StatusCode, res.Header.Get("X-Long") == header, bytes.Equal(got, body), err)
		}
	}
}
