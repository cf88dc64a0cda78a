package server

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestNewHTTPServer_H2FrameSize: over h2c the server advertises
// SETTINGS_MAX_FRAME_SIZE of H2MaxReadFrameSize (16 KiB), not net/http's
// 1 MiB: a Go client holds a send buffer of that size (up to 512 KiB)
// for each open request body, i.e. for each worker session stream.
func TestNewHTTPServer_H2FrameSize(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := NewHTTPServer("", http.NotFoundHandler())
	go func() { _ = hs.Serve(ln) }()
	defer hs.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	// The client preface and an empty SETTINGS frame (RFC 9113 §3.4).
	if _, err := io.WriteString(c, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00"); err != nil {
		t.Fatal(err)
	}
	got, ok := advertisedFrameSize(t, bufio.NewReader(c))
	if !ok {
		got = 16 << 10 // absent: the protocol's initial value
	}
	if got != H2MaxReadFrameSize || H2MaxReadFrameSize != 16<<10 {
		t.Fatalf("SETTINGS_MAX_FRAME_SIZE = %d, want %d", got, 16<<10)
	}
}

// advertisedFrameSize reads the server's first frame, which must be
// SETTINGS, and returns its MAX_FRAME_SIZE parameter (0x5) if present.
func advertisedFrameSize(t *testing.T, r *bufio.Reader) (uint32, bool) {
	t.Helper()
	var hdr [9]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		t.Fatal(err)
	}
	n := int(hdr[0])<<16 | int(hdr[1])<<8 | int(hdr[2])
	if hdr[3] != 0x4 || n%6 != 0 {
		t.Fatalf("first frame: type %d, length %d; want SETTINGS", hdr[3], n)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i += 6 {
		if binary.BigEndian.Uint16(body[i:]) == 0x5 {
			return binary.BigEndian.Uint32(body[i+2:]), true
		}
	}
	return 0, false
}
