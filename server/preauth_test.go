// Pre-authentication limits. Goal: an unauthenticated client gets its
// answer before a byte of its body is read; an admitted body has a read
// deadline and a byte bound, decompression included; connections are
// bounded in total and per source; failed authentications are throttled
// and audited per source in aggregate. Method: raw TCP requests whose body
// is never sent (so an answer proves the body was not needed), a fake
// clock for the throttle, counting readers for the decompressor.
package server

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/gen/termivar/v1/termivarv1connect"
)

// rawPost dials addr from localIP ("" for any) and sends the headers of a
// Connect unary POST to path declaring contentLength body bytes, then the
// given first body bytes. The caller closes the connection.
func rawPost(t *testing.T, addr, localIP, path, key string, contentLength int, first []byte) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second}
	if localIP != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(localIP)}
	}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	var h strings.Builder
	fmt.Fprintf(&h, "POST %s HTTP/1.1\r\nHost: termivar\r\nContent-Type: application/proto\r\nContent-Length: %d\r\n", path, contentLength)
	if key != "" {
		fmt.Fprintf(&h, "Authorization: Bearer %s\r\n", key)
	}
	h.WriteString("\r\n")
	if _, err := c.Write(append([]byte(h.String()), first...)); err != nil {
		c.Close()
		t.Fatal(err)
	}
	return c
}

// readResponse reads one response from c, failing after a generous bound.
func readResponse(t *testing.T, c net.Conn) (*http.Response, []byte) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(15 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no response: %v", err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	return res, body
}

func TestPreauth_UnauthenticatedAnsweredBeforeBody(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	addr := b.srv.Listener.Addr().String()
	cases := []struct{ name, key string }{
		{"no key", ""}, {"malformed key", "hello"}, {"unknown key", "tvk_0000000000000000_secret"}, {"wrong secret", b.adminKey + "x"},
	}
	for _, tc := range cases {
		// 40 MB declared, 5 bytes sent, the rest never: an answer can only
		// come from the headers.
		c := rawPost(t, addr, "", "/termivar.v1.Worker/Complete", tc.key, 40<<20, []byte("\x0a\x03abc"))
		res, body := readResponse(t, c)
		c.Close()
		if res.StatusCode != http.StatusUnauthorized || !bytes.Contains(body, []byte(`"code":"unauthenticated"`)) {
			t.Errorf("%s: status %d body %s, want 401 unauthenticated", tc.name, res.StatusCode, body)
		}
		if !res.Close {
			t.Errorf("%s: the connection stays open for a body that was never read", tc.name)
		}
	}
	// A complete small body too: a refused HTTP/1 connection is not kept
	// (net/http would cancel later requests on it, see refuse).
	c := rawPost(t, addr, "", "/termivar.v1.Admin/Status", "", 5, []byte("\x0a\x03abc"))
	defer c.Close()
	if res, _ := readResponse(t, c); res.StatusCode != http.StatusUnauthorized || !res.Close {
		t.Errorf("complete body: status %d, close %v; want 401 and close", res.StatusCode, res.Close)
	}
}

// TestPreauth_GRPCUnauthenticatedBeforeBody sends a gRPC request over h2c
// whose body is a pipe nobody writes to: the answer cannot have needed it.
func TestPreauth_GRPCUnauthenticatedBeforeBody(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &p}
	defer tr.CloseIdleConnections()
	pr, pw := io.Pipe()
	defer pw.Close()
	hreq, _ := http.NewRequest(http.MethodPost, b.srv.URL+"/termivar.v1.Worker/Complete", pr)
	hreq.Header.Set("Content-Type", "application/grpc")
	hreq.Header.Set("Te", "trailers")
	hreq.Header.Set("Authorization", "Bearer tvk_0000000000000000_secret")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	res, err := tr.RoundTrip(hreq.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, res.Body)
	status := res.Header.Get("Grpc-Status") + res.Trailer.Get("Grpc-Status")
	if status != "16" {
		t.Fatalf("grpc-status %q (headers %v, trailers %v), want 16 (unauthenticated)", status, res.Header, res.Trailer)
	}
}

func TestPreauth_BodyDeadlineClosesStalledBody(t *testing.T) {
	t.Parallel()
	const bodyTimeout = 300 * time.Millisecond
	b := setupServer(t, nil, Config{Limits: Limits{BodyTimeout: bodyTimeout}})
	wk := b.createKey(t, "", "worker")
	c := rawPost(t, b.srv.Listener.Addr().String(), "", "/termivar.v1.Worker/Heartbeat", wk, 1000, []byte("\x0a\x02w1"))
	defer c.Close()
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(15 * time.Second))
	_, err := io.Copy(io.Discard, c) // whatever answer, then the close
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the server kept a stalled body open for %v (body timeout %v)", time.Since(start), bodyTimeout)
	}
	t.Logf("stalled body cut off after %v (body timeout %v)", time.Since(start), bodyTimeout)
}

// TestPreauth_BodyDeadlineSparesLongPoll: the deadline is lifted once the
// body is read, so an Acquire long-poll that outlasts it is not cut off.
func TestPreauth_BodyDeadlineSparesLongPoll(t *testing.T) {
	t.Parallel()
	b := setupServer(t, nil, Config{Limits: Limits{BodyTimeout: 200 * time.Millisecond}})
	w := b.clients(b.createKey(t, "", "worker"))
	if _, err := w.worker.RegisterWorker(ctx, req(&pb.RegisterWorkerRequest{WorkerId: "w1", Capacity: 1})); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	res, err := w.worker.Acquire(ctx, req(&pb.AcquireRequest{WorkerId: "w1", WaitSecs: 1}))
	if err != nil {
		t.Fatalf("long-poll across the body deadline: %v", err)
	}
	if len(res.Msg.GetTasks()) != 0 || time.Since(start) < 900*time.Millisecond {
		t.Fatalf("long-poll returned %v after %v, want no task after about 1 s", res.Msg, time.Since(start))
	}
}

// bomb returns members gzip members of memberBytes zeros each: a gzip
// stream (members concatenate) inflating to members*memberBytes bytes.
func bomb(t testing.TB, memberBytes, members int) []byte {
	t.Helper()
	var one bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&one, gzip.BestCompression)
	if _, err := zw.Write(make([]byte, memberBytes)); err != nil {
		t.Fatal(err)
	}
	zw.Close()
	return bytes.Repeat(one.Bytes(), members)
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func TestCappedGzip_StopsAtLimit(t *testing.T) {
	t.Parallel()
	const limit = 1 << 20
	z := bomb(t, 16<<20, 16) // 256 MiB inflated
	src := &countingReader{r: bytes.NewReader(z)}
	d := &cappedGzip{max: limit}
	if err := d.Reset(src); err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, d)
	if !errors.Is(err, errInflatedTooLarge) || n != limit+1 {
		t.Fatalf("inflated %d bytes, err %v; want %d and errInflatedTooLarge", n, err, limit+1)
	}
	if src.n >= int64(len(z))/2 {
		t.Fatalf("read %d of %d compressed bytes, want it to stop early", src.n, len(z))
	}
	// A message within the limit inflates whole, and Reset starts over.
	var small bytes.Buffer
	zw := gzip.NewWriter(&small)
	zw.Write(bytes.Repeat([]byte("x"), limit))
	zw.Close()
	if err := d.Reset(&small); err != nil {
		t.Fatal(err)
	}
	if n, err := io.Copy(io.Discard, d); err != nil || n != limit {
		t.Fatalf("within the limit: %d, %v", n, err)
	}
}

// TestPreauth_GzipBombRejected sends an authenticated gzip bomb through
// the API: it is refused as too large, and answered.
func TestPreauth_GzipBombRejected(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	pk := b.createKey(t, "", "producer")
	z := bomb(t, 16<<20, 16) // 256 MiB inflated, limit 8 MiB
	hreq, _ := http.NewRequest(http.MethodPost, b.srv.URL+"/termivar.v1.Producer/Enqueue", bytes.NewReader(z))
	hreq.Header.Set("Content-Type", "application/proto")
	hreq.Header.Set("Content-Encoding", "gzip")
	hreq.Header.Set("Authorization", "Bearer "+pk)
	res, err := b.srv.Client().Do(hreq)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !bytes.Contains(body, []byte(`"code":"resource_exhausted"`)) {
		t.Fatalf("status %d body %s, want resource_exhausted", res.StatusCode, body)
	}
}

func TestLimitListener_TotalBound(t *testing.T) {
	t.Parallel()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := newLimitListener(inner, 2, 2)
	defer l.Close()
	accepted := make(chan net.Conn, 3)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	for range 3 {
		c, err := net.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	first, second := <-accepted, <-accepted
	// The third is in the backlog until a slot frees.
	first.Close()
	third := <-accepted
	defer second.Close()
	defer third.Close()
	if p := l.peak.Load(); p != 2 {
		t.Fatalf("peak open connections = %d, want 2", p)
	}
	if o := l.open.Load(); o != 2 {
		t.Fatalf("open = %d, want 2", o)
	}
}

func TestLimitListener_PerSourceBound(t *testing.T) {
	t.Parallel()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := newLimitListener(inner, 10, 1)
	defer l.Close()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	dial := func(ip string) net.Conn {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
		c, err := d.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a1 := dial("127.0.0.1")
	defer a1.Close()
	s1 := <-accepted
	defer s1.Close()
	a2 := dial("127.0.0.1") // over the per-source bound: closed at once
	defer a2.Close()
	_ = a2.SetReadDeadline(time.Now().Add(15 * time.Second))
	if _, err := a2.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !isReset(err) {
		t.Fatalf("second connection from one source: read err %v, want closed", err)
	}
	b1 := dial("127.0.0.2") // another source is admitted
	defer b1.Close()
	s2 := <-accepted
	defer s2.Close()
	if got := sourceOf(s2.RemoteAddr().String()); got != "127.0.0.2" {
		t.Fatalf("admitted %s, want 127.0.0.2", got)
	}
	if l.refused.Load() != 1 {
		t.Fatalf("refused = %d, want 1", l.refused.Load())
	}
}

func isReset(err error) bool { return err != nil && strings.Contains(err.Error(), "connection reset") }

// fakeClock is a settable clock for Config.Now.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// clientsFrom returns clients whose connections come from localIP.
func (b *testBundle) clientsFrom(t *testing.T, localIP, key string) clients {
	t.Helper()
	tr := &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(localIP)}}).DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr}
	opt := connect.WithInterceptors(authInterceptor{key})
	return clients{
		worker:   termivarv1connect.NewWorkerClient(hc, b.srv.URL, opt),
		producer: termivarv1connect.NewProducerClient(hc, b.srv.URL, opt),
		admin:    termivarv1connect.NewAdminClient(hc, b.srv.URL, opt),
	}
}

func TestPreauth_FailureThrottleAndAudit(t *testing.T) {
	t.Parallel()
	clk := &fakeClock{t: time.Unix(2_000_000, 0)}
	b := setupServer(t, nil, Config{Now: clk.now, Limits: Limits{AuthFailureBurst: 3, AuthFailureRefill: time.Minute, AuthAuditWindow: time.Hour}})
	const badKey = "tvk_0000000000000000_guessedsecret"
	bad := b.clientsFrom(t, "127.0.0.2", badKey)
	good := b.clientsFrom(t, "127.0.0.2", b.adminKey)
	status := func(c clients) error { _, err := c.admin.Status(ctx, req(&pb.StatusRequest{})); return err }
	for range 3 {
		mustCode(t, status(bad), connect.CodeUnauthenticated, KindUnauthenticated)
	}
	// Burst spent: the source is refused unchecked, good key included (a
	// throttled source learns nothing about any key).
	for range 5 {
		mustCode(t, status(bad), connect.CodeResourceExhausted, KindAuthThrottled)
	}
	err := status(good)
	mustCode(t, err, connect.CodeResourceExhausted, KindAuthThrottled)
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Meta().Get("Retry-After") != "60" {
		t.Fatalf("Retry-After = %q, want 60", ce.Meta().Get("Retry-After"))
	}
	// Another source is not affected.
	if err := status(b.clientsFrom(t, "127.0.0.1", b.adminKey)); err != nil {
		t.Fatalf("other source: %v", err)
	}
	// One refill later, one more attempt is looked at.
	clk.add(time.Minute)
	if err := status(good); err != nil {
		t.Fatalf("after a refill: %v", err)
	}
	mustCode(t, status(bad), connect.CodeUnauthenticated, KindUnauthenticated)
	mustCode(t, status(bad), connect.CodeResourceExhausted, KindAuthThrottled)

	b.api.failures.Flush(clk.now())
	data, err := os.ReadFile(b.auditLog)
	if err != nil {
		t.Fatal(err)
	}
	if want := `"event":"auth_failures","source":"127.0.0.2","failures":4,"throttled":7`; !bytes.Contains(data, []byte(want)) {
		t.Fatalf("audit log lacks %s:\n%s", want, data)
	}
	if n := bytes.Count(data, []byte(`"auth_failures"`)); n != 1 {
		t.Fatalf("%d failure lines, want 1 (aggregated):\n%s", n, data)
	}
	if bytes.Contains(data, []byte("guessedsecret")) || bytes.Contains(data, []byte(b.adminKey)) {
		t.Fatal("audit log holds a presented key")
	}
}

func TestFailureThrottle_BoundedTable(t *testing.T) {
	t.Parallel()
	th := newFailureThrottle(1, time.Second, 2)
	t0 := time.Unix(100, 0)
	th.fail("a", t0)
	th.fail("b", t0)
	th.fail("c", t0) // table full of owed sources: c is not tracked
	if th.sources() != 2 || th.retryAfter("c", t0) != 0 {
		t.Fatalf("sources = %d, c throttled for %v; want 2 and not throttled", th.sources(), th.retryAfter("c", t0))
	}
	if th.retryAfter("a", t0) != time.Second {
		t.Fatalf("a retry after %v, want 1s", th.retryAfter("a", t0))
	}
	// Once a and b are whole again they are pruned to make room.
	t1 := t0.Add(time.Second)
	th.fail("c", t1)
	if th.sources() != 1 || th.retryAfter("c", t1) != time.Second {
		t.Fatalf("after refill: sources = %d, c retry %v; want 1 and 1s", th.sources(), th.retryAfter("c", t1))
	}
}

func TestPreauth_BusyWhenPreAuthSlotsTaken(t *testing.T) {
	t.Parallel()
	b := setupServer(t, nil, Config{Limits: Limits{MaxPreAuthRequests: 2}})
	b.api.preauthSem <- struct{}{}
	b.api.preauthSem <- struct{}{}
	_, err := b.clients(b.adminKey).admin.Status(ctx, req(&pb.StatusRequest{}))
	mustCode(t, err, connect.CodeUnavailable, KindBusy)
	<-b.api.preauthSem
	if _, err := b.clients(b.adminKey).admin.Status(ctx, req(&pb.StatusRequest{})); err != nil {
		t.Fatalf("with a free slot: %v", err)
	}
	<-b.api.preauthSem
}

func TestForwardedFor_Verified(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	s := b.api
	now := time.Unix(3_000_000, 0)
	mk := func(by, v string) *http.Request {
		r, _ := http.NewRequest(http.MethodPost, "http://x/termivar.v1.Admin/Status", nil)
		r.RemoteAddr = "10.0.0.5:4000"
		if by != "" {
			r.Header.Set(ForwardedHeader, by)
		}
		if v != "" {
			r.Header.Set(ForwardedForHeader, v)
		}
		return r
	}
	sealed := s.sealForwardedFor("198.51.100.7", now)
	cases := []struct {
		name, by, v, want string
	}{
		{"sealed", s.node.NodeID(), sealed, "198.51.100.7"},
		{"no header", "", "", "10.0.0.5"},
		{"other node", "node9", sealed, "10.0.0.5"},
		{"altered ip", s.node.NodeID(), strings.Replace(sealed, "198.51.100.7", "198.51.100.8", 1), "10.0.0.5"},
		{"garbage", s.node.NodeID(), "1.2.3.4", "10.0.0.5"},
	}
	for _, tc := range cases {
		if got := s.source(mk(tc.by, tc.v), now); got != tc.want {
			t.Errorf("%s: source = %s, want %s", tc.name, got, tc.want)
		}
	}
	if got := s.source(mk(s.node.NodeID(), sealed), now.Add(2*forwardedForSkew)); got != "10.0.0.5" {
		t.Errorf("stale: source = %s, want 10.0.0.5", got)
	}
}

func TestProducer_NULTargetMessage(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	p := b.clients(b.createKey(t, "", "producer"))
	before := b.state(t)
	r := enqueueReq("s", "t1", "t2")
	r.Tasks[1].TargetRef = "secret\x00target"
	_, err := p.producer.Enqueue(ctx, req(r))
	mustCode(t, err, connect.CodeInvalidArgument, KindInvalidArgument)
	if msg := err.Error(); !strings.Contains(msg, "tasks[1].target_ref contains a NUL byte") || strings.Contains(msg, "secret") {
		t.Fatalf("message %q: want it to name the task and the NUL byte, and not quote the target", msg)
	}
	b.assertUnchanged(t, before, "NUL target")
}

// TestPreauth_ThrottledHTTP2ConnectionShutDown: over HTTP/2 a throttled
// client's connection gets a GOAWAY, so its next attempt needs a new
// connection.
func TestPreauth_ThrottledHTTP2ConnectionShutDown(t *testing.T) {
	t.Parallel()
	clk := &fakeClock{t: time.Unix(2_000_000, 0)}
	b := setupServer(t, nil, Config{Now: clk.now, Limits: Limits{AuthFailureBurst: 1, AuthFailureRefill: time.Hour}})
	var dials atomic.Int64
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	d := &net.Dialer{}
	tr := &http.Transport{Protocols: &p, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return d.DialContext(ctx, network, addr)
	}}
	defer tr.CloseIdleConnections()
	bad := termivarv1connect.NewAdminClient(&http.Client{Transport: tr}, b.srv.URL, connect.WithInterceptors(authInterceptor{"tvk_0000000000000000_x"}))
	status := func() error { _, err := bad.Status(ctx, req(&pb.StatusRequest{})); return err }
	mustCode(t, status(), connect.CodeUnauthenticated, KindUnauthenticated)
	mustCode(t, status(), connect.CodeResourceExhausted, KindAuthThrottled)
	if n := dials.Load(); n != 1 {
		t.Fatalf("%d dials before the throttled answer, want 1 (one HTTP/2 connection)", n)
	}
	waitUntil(t, "the throttled client's HTTP/2 connection to be closed (a new dial)", func() bool {
		mustCode(t, status(), connect.CodeResourceExhausted, KindAuthThrottled)
		return dials.Load() >= 2
	})
}

func TestLimits_Validate(t *testing.T) {
	t.Parallel()
	if err := (Limits{}).Validate(); err != nil {
		t.Fatalf("zero Limits: %v", err)
	}
	if err := DefaultLimits().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for _, l := range []Limits{{MaxConns: -1}, {BodyTimeout: -time.Second}, {AuthSources: -1}, {AuthAuditWindow: -1}, {MaxSessionsPerKey: -1}, {MaxSessionMessages: -1}} {
		if err := l.Validate(); !errors.Is(err, ErrInvalidLimits) {
			t.Errorf("Validate(%+v) = %v, want ErrInvalidLimits", l, err)
		}
	}
	if got := (Limits{MaxConns: 7}).withDefaults(); got.MaxConns != 7 || got.BodyTimeout != DefaultLimits().BodyTimeout {
		t.Fatalf("withDefaults = %+v", got)
	}
}
