package server

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/proxytest"
	"github.com/rustle-proxy/rustle/internal/tlsconf"
)

// alpnOrigins starts a plain and a TLS origin (which speaks HTTP/2 to
// clients that offer it) that answer with the method, path, protocol and
// body they received, and adds the TLS one's certificate to roots.
func alpnOrigins(t *testing.T, roots *x509.CertPool) (plain, tlsURL string) {
	t.Helper()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		io.WriteString(w, r.Method+" "+r.URL.Path+" "+r.Proto+" "+string(b))
	})
	o := httptest.NewServer(h)
	t.Cleanup(o.Close)
	to := httptest.NewUnstartedServer(h)
	to.EnableHTTP2 = true
	to.StartTLS()
	t.Cleanup(to.Close)
	roots.AddCert(to.Certificate())
	return o.URL, to.URL
}

// goTransport returns http.DefaultTransport's clone, as a Go program
// using the https proxy at addr would: HTTP/2 stays enabled
// (ForceAttemptHTTP2), so Go offers ALPN "h2" to the proxy too. roots
// is trusted for the proxy and the origins. t.Cleanup closes its idle
// connections.
func goTransport(t *testing.T, addr string, roots *x509.CertPool) *http.Transport {
	t.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = http.ProxyURL(&url.URL{Scheme: "https", Host: addr, User: url.UserPassword("alice", "pw")})
	tr.TLSClientConfig = &tls.Config{RootCAs: roots}
	if !tr.ForceAttemptHTTP2 {
		t.Fatal("http.DefaultTransport no longer sets ForceAttemptHTTP2")
	}
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

// goDo sends method url (with body, when not "") through tr and returns
// the response body, failing unless the status is 200.
func goDo(t *testing.T, tr http.RoundTripper, method, u, body string) string {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatalf("%s %s through the https proxy: %v", method, u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("%s %s through the https proxy: %d %q %v", method, u, resp.StatusCode, b, err)
	}
	return string(b)
}

// TestHTTPSGoTransportOffersH2 checks that Go's default transport, which
// offers ALPN h2 to an https:// proxy and then speaks HTTP/1.1 on the
// connection, is served HTTP/1.1 on the default https listener, while
// clients that speak HTTP/2 after choosing it still get HTTP/2 there.
func TestHTTPSGoTransportOffersH2(t *testing.T) {
	tl, roots := proxyCerts(t)
	plain, tlsURL := alpnOrigins(t, roots)
	srv, addrs := startListeners(t, 5*time.Second,
		config.Listener{Name: "tls", Address: "127.0.0.1:0", Protocol: "https", TLS: tl})
	proxy := addrs[0]

	t.Run("Go transport", func(t *testing.T) {
		tr := goTransport(t, proxy, roots)
		tests := []struct {
			name, method, url, body, want string
		}{
			{"CONNECT GET", "GET", tlsURL + "/a", "", "GET /a HTTP/2.0 "},
			{"CONNECT POST", "POST", tlsURL + "/b", "field=value", "POST /b HTTP/2.0 field=value"},
			{"CONNECT PUT", "PUT", tlsURL + "/c", strings.Repeat("x", 100<<10), "PUT /c HTTP/2.0 " + strings.Repeat("x", 100<<10)},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				if got := goDo(t, tr, tt.method, tt.url, tt.body); got != tt.want {
					t.Fatalf("got %.80q, want %.80q", got, tt.want)
				}
			})
		}
	})

	t.Run("tunnel on the engine", func(t *testing.T) {
		if runtime.GOOS != "linux" {
			t.Skip("the engine's TLS tunnels are Linux's")
		}
		onEngine := func() int {
			n := 0
			for _, e := range srv.engines {
				n += e.Len()
			}
			return n
		}
		waitFor(t, "earlier tunnels to end", func() bool { return onEngine() == 0 })
		tr := goTransport(t, proxy, roots)
		goDo(t, tr, "GET", tlsURL+"/keep", "")
		// The tunnel stays open (Go keeps the origin connection alive),
		// relayed by a worker's engine on the original *tls.Conn, with
		// no goroutine of its own.
		waitFor(t, "the CONNECT tunnel on the engine", func() bool { return onEngine() == 1 })
		if stacks := allStacks(); strings.Contains(stacks, "tunnel.(*tlsRelay)") {
			t.Errorf("a TLS relay goroutine runs beside the engine's tunnel:\n%s", stacks)
		}
	})

	t.Run("HTTP/2 client", func(t *testing.T) {
		tc := dialALPN(t, proxy, roots, "h2", "http/1.1")
		if p := tc.ConnectionState().NegotiatedProtocol; p != "h2" {
			t.Fatalf("ALPN %q, want h2", p)
		}
		cc, err := (&http2.Transport{AllowHTTP: true}).NewClientConn(tc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		req, _ := http.NewRequest("POST", plain+"/h2", strings.NewReader("over h2"))
		req.Header.Set("Proxy-Authorization", "Basic YWxpY2U6cHc=")
		resp, err := cc.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "POST /h2 HTTP/1.1 over h2" {
			t.Fatalf("POST over h2: %d %q", resp.StatusCode, b)
		}
	})

	t.Run("curl", func(t *testing.T) {
		caFile := filepath.Join(filepath.Dir(tl.Cert), tlsconf.CAFile)
		out, err := runCurl(t, "--proxy", "https://alice:pw@"+proxy, "--proxy-cacert", caFile, plain+"/curl")
		if err != nil || out != "GET /curl HTTP/1.1 " {
			t.Fatalf("curl GET through the https proxy: %v %q", err, out)
		}
		out, err = runCurl(t, "--proxy", "https://alice:pw@"+proxy, "--proxy-cacert", caFile, "-k", "-d", "curl body", tlsURL+"/curl")
		if err != nil || !strings.HasPrefix(out, "POST /curl HTTP/") || !strings.HasSuffix(out, " curl body") {
			t.Fatalf("curl POST over CONNECT through the https proxy: %v %q", err, out)
		}
	})
}

// TestHTTPSH2ChosenHTTP1Spoken checks, on the wire, that a client that
// chose h2 and then sends an HTTP/1.1 request is answered in HTTP/1.1
// with every byte of its request, however its first bytes are split into
// TLS records (POST and PUT begin as the HTTP/2 preface does), and that a
// client that sends neither a request nor the preface, nothing, or only
// part of the preface is closed (the last two when the read-header
// timeout passes) with nothing written to it.
func TestHTTPSH2ChosenHTTP1Spoken(t *testing.T) {
	tl, roots := proxyCerts(t)
	plain, _ := alpnOrigins(t, roots)
	host := strings.TrimPrefix(plain, "http://")
	_, addrs := startListeners(t, time.Second,
		config.Listener{Name: "tls", Address: "127.0.0.1:0", Protocol: "https", TLS: tl})
	proxy := addrs[0]

	const auth = "Proxy-Authorization: Basic YWxpY2U6cHc=\r\n"
	post := "POST http://" + host + "/p HTTP/1.1\r\nHost: " + host + "\r\n" + auth +
		"Content-Length: 4\r\nConnection: close\r\n\r\nbody"
	tests := []struct {
		name   string
		writes []string // each written as its own TLS record
		want   string   // the response's body; "" = closed with no byte written
	}{
		{"GET in one record", []string{"GET http://" + host + "/g HTTP/1.1\r\nHost: " + host + "\r\n" + auth + "Connection: close\r\n\r\n"}, "GET /g HTTP/1.1 "},
		{"POST split after P", []string{"P", post[1:]}, "POST /p HTTP/1.1 body"},
		{"POST byte by byte", strings.Split(post[:8], ""), "POST /p HTTP/1.1 body"},
		{"CONNECT byte by byte", strings.Split("CONNECT "+host+" HTTP/1.1\r\n", ""), "CONNECT"},
		// Neither the preface nor a request: closed, as HTTP/2 would.
		{"PRI that is not the preface", []string{"PRI * HTTP/1.1\r\n\r\n"}, ""},
		{"h2spec's invalid preface", []string{"INVALID CONNECTION PREFACE\r\n\r\n"}, ""},
		{"an extension method", []string{"PROPFIND http://" + host + "/ HTTP/1.1\r\n\r\n"}, ""},
		{"silent", nil, ""},
		{"part of the preface", []string{http2.ClientPreface[:10], http2.ClientPreface[10:20]}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tc := dialALPN(t, proxy, roots, "h2", "http/1.1")
			if p := tc.ConnectionState().NegotiatedProtocol; p != "h2" {
				t.Fatalf("ALPN %q, want h2", p)
			}
			sent := 0
			for _, w := range tt.writes {
				if _, err := io.WriteString(tc, w); err != nil {
					t.Fatal(err)
				}
				sent += len(w)
			}
			switch tt.name {
			case "POST byte by byte":
				io.WriteString(tc, post[sent:])
			case "CONNECT byte by byte":
				io.WriteString(tc, "Host: "+host+"\r\n"+auth+"\r\n")
				// The tunnel is open: through it, a request to the origin.
				br := bufio.NewReader(tc)
				resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
				if err != nil || resp.StatusCode != 200 {
					t.Fatalf("CONNECT: %v %v", resp, err)
				}
				io.WriteString(tc, "GET /t HTTP/1.1\r\nHost: "+host+"\r\nConnection: close\r\n\r\n")
				resp, err = http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("GET through the tunnel: %v", err)
				}
				b, _ := io.ReadAll(resp.Body)
				if string(b) != "GET /t HTTP/1.1 " {
					t.Fatalf("GET through the tunnel: %d %q", resp.StatusCode, b)
				}
				return
			}
			tc.SetReadDeadline(time.Now().Add(5 * time.Second))
			got, err := io.ReadAll(tc)
			if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("not closed within 5s (read-header timeout 1s); read %q", got)
			}
			switch {
			case tt.want == "":
				if len(got) != 0 {
					t.Fatalf("read %q, want the connection closed with nothing written", got)
				}
			default:
				if !bytes.HasPrefix(got, []byte("HTTP/1.1 200 ")) || !bytes.HasSuffix(got, []byte("\r\n\r\n"+tt.want)) {
					t.Fatalf("read %q, want an HTTP/1.1 200 with body %q", got, tt.want)
				}
			}
		})
	}
}

// TestFirstBytesKind checks how the first bytes of a client that chose
// h2 are told apart, without allocating.
func TestFirstBytesKind(t *testing.T) {
	tests := []struct {
		in   string
		want int
	}{
		{"", firstMore},
		{"P", firstMore},
		{"PR", firstMore},
		{"PRI * HTTP/2.0\r\n\r\nSM\r\n\r", firstMore},
		{http2.ClientPreface, firstH2},
		{"PRI * HTTP/1.1\r\n", firstOther},
		{"PO", firstMore},
		{"POST", firstMore},
		{"POST ", firstHTTP1},
		{"POST http://a/ HTTP/1.1\r\n", firstHTTP1},
		{"PUT /", firstHTTP1},
		{"PA", firstMore},
		{"PATCH ", firstHTTP1},
		{"G", firstMore},
		{"GET http", firstHTTP1},
		{"GETX", firstOther},
		{"C", firstMore},
		{"CONNECT", firstMore},
		{"CONNECT a:443 HTTP/1.1\r\n", firstHTTP1},
		{"HEAD ", firstHTTP1},
		{"DELETE ", firstHTTP1},
		{"OPTIONS *", firstHTTP1},
		{"TRACE /", firstHTTP1},
		{"get / HTTP/1.1", firstOther},
		{"\r\nGET / HTTP/1.1", firstOther},
		{"INVALID CONNECTION PREFACE", firstOther},
		{"PROPFIND ", firstOther},
		{"\x00\x00\x12\x04", firstOther},
	}
	for _, tt := range tests {
		if got := firstBytesKind([]byte(tt.in)); got != tt.want {
			t.Errorf("firstBytesKind(%q) = %d, want %d", tt.in, got, tt.want)
		}
	}
	b := []byte("CONNECT example.com:443 HTTP/1.1\r\n")
	if n := testing.AllocsPerRun(100, func() { firstBytesKind(b[:3]); firstBytesKind(b[:12]) }); n != 0 {
		t.Errorf("firstBytesKind allocates %v times", n)
	}
}

// TestHTTPSShutdownWakesALPNWait checks that a client that chose h2 and
// sent nothing yet does not hold up a drain until the read-header
// timeout.
func TestHTTPSShutdownWakesALPNWait(t *testing.T) {
	tl, roots := proxyCerts(t)
	s, addrs := startListeners(t, time.Minute,
		config.Listener{Name: "tls", Address: "127.0.0.1:0", Protocol: "https", TLS: tl})
	tc := dialALPN(t, addrs[0], roots, "h2", "http/1.1")
	if p := tc.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("ALPN %q, want h2", p)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v after %v, with a silent client that chose h2", err, time.Since(start))
	}
}

// dialALPN connects to the https listener at addr offering protos with
// ALPN (none when empty) and completes the handshake; t.Cleanup closes
// the connection.
func dialALPN(t *testing.T, addr string, roots *x509.CertPool, protos ...string) *tls.Conn {
	t.Helper()
	tc, err := tryALPN(addr, roots, protos...)
	if err != nil {
		t.Fatalf("TLS handshake offering %q: %v", protos, err)
	}
	t.Cleanup(func() { tc.Close() })
	return tc
}

// tryALPN is dialALPN returning the handshake's error.
func tryALPN(addr string, roots *x509.CertPool, protos ...string) (*tls.Conn, error) {
	d := &tls.Dialer{Config: &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", NextProtos: protos}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return c.(*tls.Conn), nil
}

// allStacks returns the stacks of every goroutine.
func allStacks() string {
	buf := make([]byte, 1<<20)
	return string(buf[:runtime.Stack(buf, true)])
}

// TestHTTPSALPNKey checks a listener's alpn key: what ALPN chooses for
// clients offering each set of protocols, and that Go's default
// transport works through an http/1.1-only listener for http:// origins
// too (with h2 chosen, Go refuses those itself: "http2: unencrypted
// HTTP/2 not enabled").
func TestHTTPSALPNKey(t *testing.T) {
	tl, roots := proxyCerts(t)
	plain, tlsURL := alpnOrigins(t, roots)
	_, addrs := startListeners(t, 5*time.Second,
		config.Listener{Name: "h1", Address: "127.0.0.1:0", Protocol: "https", TLS: tl, ALPN: []string{"http/1.1"}},
		config.Listener{Name: "h2", Address: "127.0.0.1:0", Protocol: "https", TLS: tl, ALPN: []string{"h2"}},
		config.Listener{Name: "h1 first", Address: "127.0.0.1:0", Protocol: "https", TLS: tl, ALPN: []string{"http/1.1", "h2"}},
		config.Listener{Name: "default", Address: "127.0.0.1:0", Protocol: "https", TLS: tl})
	h1, h2only, h1first, def := addrs[0], addrs[1], addrs[2], addrs[3]

	tests := []struct {
		name   string
		addr   string
		offer  []string
		want   string // the protocol chosen; "refused" = the handshake fails; "closed" = closed after it
		h1Body string // for a connection that chose no protocol or http/1.1: the body of a GET through it
	}{
		{"http/1.1 only, offered both", h1, []string{"h2", "http/1.1"}, "http/1.1", "GET /x HTTP/1.1 "},
		{"http/1.1 only, offered h2", h1, []string{"h2"}, "refused", ""},
		{"http/1.1 only, offered none", h1, nil, "", "GET /x HTTP/1.1 "},
		{"h2 only, offered both", h2only, []string{"h2", "http/1.1"}, "h2", ""},
		// crypto/tls completes a handshake offering only http/1.1 with no
		// protocol chosen, rather than refuse it.
		{"h2 only, offered http/1.1", h2only, []string{"http/1.1"}, "closed", ""},
		{"h2 only, offered none", h2only, nil, "closed", ""},
		{"http/1.1 first, offered both", h1first, []string{"h2", "http/1.1"}, "http/1.1", "GET /x HTTP/1.1 "},
		{"http/1.1 first, offered h2", h1first, []string{"h2"}, "h2", ""},
		{"default, offered both", def, []string{"http/1.1", "h2"}, "h2", ""},
		{"default, offered none", def, nil, "", "GET /x HTTP/1.1 "},
	}
	host := strings.TrimPrefix(plain, "http://")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tc, err := tryALPN(tt.addr, roots, tt.offer...)
			if tt.want == "refused" {
				if err == nil {
					tc.Close()
					t.Fatalf("handshake offering %q succeeded with %q, want it refused", tt.offer, tc.ConnectionState().NegotiatedProtocol)
				}
				return
			}
			if err != nil {
				t.Fatalf("handshake offering %q: %v", tt.offer, err)
			}
			defer tc.Close()
			want := tt.want
			if want == "closed" {
				want = ""
			}
			if got := tc.ConnectionState().NegotiatedProtocol; got != want {
				t.Fatalf("offering %q chose %q, want %q", tt.offer, got, want)
			}
			tc.SetDeadline(time.Now().Add(5 * time.Second))
			switch {
			case tt.want == "closed":
				if b, err := io.ReadAll(tc); len(b) != 0 || err != nil {
					t.Fatalf("read %q, %v; want the connection closed with nothing written", b, err)
				}
			case tt.h1Body != "":
				io.WriteString(tc, "GET http://"+host+"/x HTTP/1.1\r\nHost: "+host+
					"\r\nProxy-Authorization: Basic YWxpY2U6cHc=\r\nConnection: close\r\n\r\n")
				b, _ := io.ReadAll(tc)
				if !bytes.HasPrefix(b, []byte("HTTP/1.1 200 ")) || !bytes.HasSuffix(b, []byte("\r\n\r\n"+tt.h1Body)) {
					t.Fatalf("GET over %q: read %q, want a 200 with body %q", want, b, tt.h1Body)
				}
			}
		})
	}

	t.Run("Go transport, http/1.1 only", func(t *testing.T) {
		tr := goTransport(t, h1, roots)
		for _, c := range []struct{ method, url, body, want string }{
			{"GET", plain + "/a", "", "GET /a HTTP/1.1 "},
			{"POST", plain + "/b", "a body", "POST /b HTTP/1.1 a body"},
			{"GET", tlsURL + "/c", "", "GET /c HTTP/2.0 "},
			{"POST", tlsURL + "/d", "a body", "POST /d HTTP/2.0 a body"},
		} {
			if got := goDo(t, tr, c.method, c.url, c.body); got != c.want {
				t.Errorf("%s %s: got %q, want %q", c.method, c.url, got, c.want)
			}
		}
	})
}

// TestReloadALPN checks that a reload changing a listener's alpn applies
// to new connections, the listener keeping its socket and certificate.
func TestReloadALPN(t *testing.T) {
	tl, roots := proxyCerts(t)
	withALPN := func(alpn []string) *config.Config {
		return reloadConfig(t, func(c *config.Config) {
			c.Listen = []config.Listener{{Name: "tls", Address: "127.0.0.1:0", Protocol: "https", TLS: tl, ALPN: alpn}}
		})
	}
	s := startReloadable(t, withALPN(nil))
	addr := addrOf(s, "tls")
	chosen := func() string {
		t.Helper()
		tc := dialALPN(t, addr, roots, "h2", "http/1.1")
		defer tc.Close()
		return tc.ConnectionState().NegotiatedProtocol
	}
	for _, step := range []struct {
		alpn []string
		want string
	}{
		{nil, "h2"},
		{[]string{"http/1.1"}, "http/1.1"},
		{[]string{"http/1.1", "h2"}, "http/1.1"},
		{[]string{"h2", "http/1.1"}, "h2"},
	} {
		if err := s.Reload(withALPN(step.alpn)); err != nil {
			t.Fatalf("Reload to alpn %q: %v", step.alpn, err)
		}
		if got := chosen(); got != step.want {
			t.Errorf("after a reload to alpn %q, ALPN chose %q, want %q", step.alpn, got, step.want)
		}
	}
	if got := addrOf(s, "tls"); got != addr {
		t.Errorf("listener moved from %s to %s", addr, got)
	}
}

// TestHTTPSListenerH2Tools runs h2spec's conformance suite and nghttp
// (a proxy-style request: :scheme http, the origin's :authority) against
// an https listener with the default alpn, where rustle reads a client's
// first bytes before it serves HTTP/2.
func TestHTTPSListenerH2Tools(t *testing.T) {
	tl, roots := proxyCerts(t)
	plain, _ := alpnOrigins(t, roots)
	_, addrs := startListeners(t, 5*time.Second,
		config.Listener{Name: "tls", Address: "127.0.0.1:0", Protocol: "https", TLS: tl, Auth: config.AuthNone})
	_, port, _ := net.SplitHostPort(addrs[0])
	// run runs bin with stdin and returns its standard output.
	run := func(t *testing.T, stdin, bin string, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Stdin = strings.NewReader(stdin)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: %v\n%s%s", filepath.Base(bin), err, out, stderr.Bytes())
		}
		return string(out)
	}
	t.Run("h2spec", func(t *testing.T) {
		bin := proxytest.FindTool("h2spec")
		if bin == "" {
			t.Skip("h2spec not installed (scripts/deps.sh installs it)")
		}
		out := run(t, "", bin, "-t", "-k", "-h", "127.0.0.1", "-p", port, "-o", "5")
		if !strings.Contains(out, " 0 failed") {
			t.Fatalf("h2spec:\n%s", out)
		}
	})
	t.Run("nghttp", func(t *testing.T) {
		bin := proxytest.FindTool("nghttp")
		if bin == "" {
			t.Skip("nghttp not installed (scripts/deps.sh installs nghttp2-client)")
		}
		host := strings.TrimPrefix(plain, "http://")
		out := run(t, "sent by nghttp", bin, "-H", ":authority: "+host, "-H", ":scheme: http", "-d", "-", "https://"+addrs[0]+"/nghttp")
		if out != "POST /nghttp HTTP/1.1 sent by nghttp" {
			t.Fatalf("nghttp through the proxy: %q", out)
		}
	})
}
