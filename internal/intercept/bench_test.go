package intercept_test

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/intercept"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// keepAliveTunnel opens an intercepted tunnel (HTTP/1.1 both sides,
// the upstream connection pooled, no access log) to an origin that
// answers 1 KiB of fixed bytes and allocates nothing, and returns the
// exchange of one request inside it: written on the client's tls.Conn,
// its answer read whole into a buffer of its length; and the body.
func keepAliveTunnel(tb testing.TB) (exchange func() error, answer *[]byte, body string) {
	tb.Helper()
	cert, roots := proxytest.SelfSigned(tb)
	body = strings.Repeat("b", 1024)
	o := proxytest.NewStaticTLSOrigin(tb, cert, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 1024\r\n\r\n"+body)
	return keepAliveTunnelTo(tb, o.Addr, roots, body)
}

// keepAliveTunnelTo is keepAliveTunnel to the origin at addr, whose
// certificate roots verify, and which answers body to every request.
func keepAliveTunnelTo(tb testing.TB, addr string, roots *x509.CertPool, body string) (exchange func() error, answer *[]byte, _ string) {
	tb.Helper()
	_, port, _ := net.SplitHostPort(addr)
	e := newEnv(tb, envConfig{rules: []intercept.Rule{{Name: "bench", Match: acl.Rule{Hosts: []string{"localhost"}}}}, roots: roots,
		noH2: true, pool: true, noLog: true})
	raw, err := net.Dial("tcp", e.proxy)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { raw.Close() })
	raw.SetDeadline(time.Now().Add(5 * time.Minute))
	io.WriteString(raw, "CONNECT localhost:"+port+" HTTP/1.1\r\nHost: localhost:"+port+"\r\n\r\n")
	br := bufio.NewReader(raw)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 || br.Buffered() != 0 {
		tb.Fatalf("CONNECT: %v, %v", resp, err)
	}
	c := tls.Client(raw, &tls.Config{RootCAs: e.ca, ServerName: "localhost", NextProtos: []string{"http/1.1"}})
	req := []byte("GET /1k HTTP/1.1\r\nHost: localhost:" + port + "\r\nUser-Agent: bench\r\n\r\n")
	if _, err := c.Write(req); err != nil {
		tb.Fatal(err)
	}
	// The first answer tells the length of every one (the same bytes).
	cr := &countReader{r: c}
	cb := bufio.NewReader(cr)
	first, err := http.ReadResponse(cb, nil)
	if err != nil {
		tb.Fatal(err)
	}
	got, err := io.ReadAll(first.Body)
	if err != nil || first.StatusCode != 200 || string(got) != body || cb.Buffered() != 0 {
		tb.Fatalf("first answer: %d, %q, %v", first.StatusCode, got, err)
	}
	buf := make([]byte, cr.n)
	return func() error {
		if _, err := c.Write(req); err != nil {
			return err
		}
		_, err := io.ReadFull(c, buf)
		return err
	}, &buf, body
}

// BenchmarkInterceptKeepAlive1K is keep-alive GETs of 1 KiB answers
// inside one intercepted tunnel (see keepAliveTunnel), one at a time:
// what it costs beyond both ends' TLS is the proxy's, allocations
// included (crypto/tls allocates once per record read that waited: the
// client's, the origin's and the proxy's two).
//
//	go test ./internal/intercept -run '^$' -bench KeepAlive1K -benchmem -cpuprofile cpu.out
func BenchmarkInterceptKeepAlive1K(b *testing.B) {
	exchange, answer, body := keepAliveTunnel(b)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if err := exchange(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if !strings.HasSuffix(string(*answer), body) {
		b.Fatalf("last answer %q", *answer)
	}
}

// BenchmarkInterceptKeepAlive1KH2Origin is BenchmarkInterceptKeepAlive1K
// to an origin that speaks HTTP/2 (net/http's server): the requests go
// through the bridge of origin.h2Conn and x/net/http2's ClientConn, and
// the origin's allocations count too.
func BenchmarkInterceptKeepAlive1KH2Origin(b *testing.B) {
	cert, roots := proxytest.SelfSigned(b)
	body := strings.Repeat("b", 1024)
	o := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Content-Length", "1024")
		io.WriteString(w, body)
	}))
	o.EnableHTTP2 = true
	o.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}}
	o.StartTLS()
	b.Cleanup(o.Close)
	exchange, answer, _ := keepAliveTunnelTo(b, o.Listener.Addr().String(), roots, body)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if err := exchange(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if !strings.HasSuffix(string(*answer), body) {
		b.Fatalf("last answer %q", *answer)
	}
}

// TestInterceptKeepAliveAllocs checks that an intercepted connection
// whose client sends its next request at once is served on without
// parking it (parking costs an epoll registration, a timer and two
// goroutines per request): the requests of keepAliveTunnel allocate, in
// the whole process, only crypto/tls's one per record read that waited
// (the client's, the origin's and the proxy's two), with one to spare.
func TestInterceptKeepAliveAllocs(t *testing.T) {
	exchange, answer, body := keepAliveTunnel(t)
	for range 20 {
		if err := exchange(); err != nil {
			t.Fatal(err)
		}
	}
	var failed error
	n := testing.AllocsPerRun(200, func() {
		if err := exchange(); err != nil && failed == nil {
			failed = err
		}
	})
	if failed != nil || !strings.HasSuffix(string(*answer), body) {
		t.Fatalf("exchange: %v, last answer %q", failed, *answer)
	}
	limit := 5.0
	if proxytest.Race {
		limit = 14 // the race detector's sync.Pool drops some of what is put back
	}
	t.Logf("%v allocations per request", n)
	if n > limit {
		t.Errorf("%v allocations per intercepted keep-alive request, want at most %v", n, limit)
	}
}

// countReader counts the bytes read through it.
type countReader struct {
	r io.Reader
	n int
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}
