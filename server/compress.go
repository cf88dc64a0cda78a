package server

import (
	"compress/gzip"
	"errors"
	"io"

	"connectrpc.com/connect"
)

// errInflatedTooLarge is returned by a cappedGzip that inflated more than
// its bound.
var errInflatedTooLarge = errors.New("decompressed message is larger than the request limit")

// cappedGzip is a gzip connect.Decompressor that fails as soon as it has
// produced more than max bytes. NB: connect's WithReadMaxBytes bounds what
// it keeps of a compressed message, but then inflates the rest into
// io.Discard to report the size: a small gzip bomb costs seconds of CPU.
// With this reader the work stops one byte past the limit.
type cappedGzip struct {
	zr  gzip.Reader
	max int64
	n   int64 // bytes produced since Reset
}

func (c *cappedGzip) Read(p []byte) (int, error) {
	if c.n > c.max {
		return 0, errInflatedTooLarge
	}
	if room := c.max + 1 - c.n; int64(len(p)) > room {
		p = p[:room]
	}
	n, err := c.zr.Read(p)
	c.n += int64(n)
	return n, err
}

func (c *cappedGzip) Close() error { return c.zr.Close() }

func (c *cappedGzip) Reset(r io.Reader) error {
	c.n = 0
	return c.zr.Reset(r)
}

// withCappedGzip replaces connect's gzip support of a handler by one whose
// decompression stops past maxBytes (responses are compressed as before).
func withCappedGzip(maxBytes int64) connect.HandlerOption {
	return connect.WithCompression("gzip",
		func() connect.Decompressor { return &cappedGzip{max: maxBytes} },
		func() connect.Compressor { return gzip.NewWriter(io.Discard) },
	)
}
