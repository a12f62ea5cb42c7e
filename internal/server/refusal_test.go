package server

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// This file checks that what rustle refuses before a request can be
// decided (a malformed, oversized, ambiguous or unfinished HTTP/1.1 head,
// an HTTP/2 protocol error, a failed TLS handshake, plain HTTP on the TLS
// port) leaves one access log record with its reason and one debug line,
// on every listener that speaks it, and never a byte of a header value or
// a body.

// refusalMaxHead is the rig's max_header_bytes.
const refusalMaxHead = 4096

// refusalRig is a server with an http, an https and a mixed listener, an
// access log and a debug log.
type refusalRig struct {
	addr   map[string]string
	roots  *x509.CertPool
	access *logBuffer
	debug  *logBuffer
	origin *proxytest.Origin
}

func startRefusalRig(t *testing.T, format accesslog.Format) *refusalRig {
	t.Helper()
	tl, roots := proxyCerts(t)
	cfg := config.Default()
	cfg.Workers = 1
	cfg.MaxHeaderBytes = refusalMaxHead
	cfg.Timeouts.ReadHeader.Duration = 2 * time.Second
	cfg.Timeouts.IdleClient.Duration = 2 * time.Second
	cfg.AllowPrivate = []string{"127.0.0.1/32"}
	cfg.Listen = []config.Listener{
		{Name: "plain", Address: "127.0.0.1:0", Protocol: "http"},
		{Name: "tls", Address: "127.0.0.1:0", Protocol: "https", TLS: tl},
		{Name: "mixed", Address: "127.0.0.1:0", Protocol: "mixed"},
	}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	r := &refusalRig{roots: roots, access: &logBuffer{}, debug: &logBuffer{},
		origin: proxytest.NewOrigin(t, proxytest.Respond(200, "ok"))}
	logger := slog.New(slog.NewTextHandler(r.debug, &slog.HandlerOptions{Level: slog.LevelDebug}))
	_, r.addr = startLoggedAs(t, cfg, logger, r.access, format)
	return r
}

// refusalClients numbers the rig's client connections: each comes from
// a loopback address of its own, so that a record is never taken for
// another connection's that had the same port (the logs keep every
// record of the test, and parallel subtests reuse ports).
var refusalClients atomic.Uint32

// dial connects to listener from a loopback address no other connection
// of the test used, over TLS offering only HTTP/1.1 for "tls".
func (r *refusalRig) dial(t *testing.T, listener string) net.Conn {
	t.Helper()
	c := r.dialTCP(t, listener)
	if listener != "tls" {
		return c
	}
	tc := tls.Client(c, &tls.Config{RootCAs: r.roots, ServerName: "localhost", NextProtos: []string{"http/1.1"}})
	if err := tc.Handshake(); err != nil {
		t.Fatalf("TLS handshake: %v", err)
	}
	return tc
}

// dialTCP connects to listener over TCP, from a loopback address of its
// own (see dial), with a 10 s deadline; the connection is closed when
// the test ends.
func (r *refusalRig) dialTCP(t *testing.T, listener string) net.Conn {
	t.Helper()
	n := refusalClients.Add(1)
	from := net.IPv4(127, 3, byte(n>>8), byte(n))
	c, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: from}}).Dial("tcp", r.addr[listener])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return c
}

// refusalRecord is the access log record fields checked.
type refusalRecord struct {
	Listener string `json:"listener"`
	Client   string `json:"client"`
	Protocol string `json:"protocol"`
	Method   string `json:"method"`
	Target   string `json:"target"`
	Status   int    `json:"status"`
	Reason   string `json:"reason"`
}

// records returns the JSON records of the client at client.
func (r *refusalRig) records(t *testing.T, client string) []refusalRecord {
	t.Helper()
	var recs []refusalRecord
	for line := range strings.Lines(r.access.String()) {
		var rec refusalRecord
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("access log line %q: %v", line, err)
		}
		if rec.Client == client {
			recs = append(recs, rec)
		}
	}
	return recs
}

// waitRecords waits for n records of client and returns them.
func (r *refusalRig) waitRecords(t *testing.T, client string, n int) []refusalRecord {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d access log records of %s", n, client), func() bool { return len(r.records(t, client)) >= n })
	return r.records(t, client)
}

// debugLines returns the debug log lines naming client.
func (r *refusalRig) debugLines(client string) []string {
	var out []string
	for line := range strings.Lines(r.debug.String()) {
		if strings.Contains(line, " client="+client) {
			out = append(out, line)
		}
	}
	return out
}

// checkDebug checks that the refusal of client was logged at debug once,
// with its reason and status.
func (r *refusalRig) checkDebug(t *testing.T, client string, want refusalRecord) {
	t.Helper()
	lines := r.debugLines(client)
	if len(lines) != 1 || !strings.Contains(lines[0], `msg="gate: request refused"`) ||
		!strings.Contains(lines[0], " reason="+want.Reason+" ") || !strings.Contains(lines[0], fmt.Sprintf(" status=%d ", want.Status)) {
		t.Errorf("debug lines of %s: %q, want one refusal with reason %s and status %d", client, lines, want.Reason, want.Status)
	}
}

// secret is in the header values and bodies the refused requests carry:
// none may reach a log.
const secret = "hunter2"

// checkNoSecret fails the test if a header value or body byte reached a
// log.
func (r *refusalRig) checkNoSecret(t *testing.T) {
	t.Helper()
	if s := r.access.String() + r.debug.String(); strings.Contains(s, secret) {
		t.Errorf("a header value or body in the logs:\n%s", s)
	}
}

// readStatus reads an HTTP/1.1 answer from c and returns its status, or
// 0 when c was closed without one.
func readStatus(t *testing.T, br *bufio.Reader) int {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return 0
		}
		t.Fatalf("read the answer: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestHTTP1RefusalsLogged sends what the HTTP/1.1 proxy refuses before
// deciding a request, on the plain, TLS and mixed ports, and checks the
// answer, the one access log record (protocol, method and target as far
// as parsed, status, reason), the debug line, and that no header value or
// body byte is logged. A connection that never sends a byte, or that
// idles after a request, is closed without a record.
func TestHTTP1RefusalsLogged(t *testing.T) {
	r := startRefusalRig(t, accesslog.FormatJSON)
	u := r.origin.URL("/a")
	h := "Host: " + r.origin.Addr + "\r\n"
	post := "POST " + u + " HTTP/1.1\r\n" + h
	// A head of exactly max_header_bytes with no end: all of it is read.
	tooLarge := "GET " + u + " HTTP/1.1\r\n" + h + "X-Secret: "
	tooLarge += strings.Repeat(secret, refusalMaxHead/len(secret))
	tooLarge = tooLarge[:refusalMaxHead]
	tests := []struct {
		name   string
		before bool   // a request is served first on the connection
		send   string // "" = nothing: wait for the close
		want   refusalRecord
	}{
		{name: "malformed request line", send: "GET  " + u + " HTTP/1.1\r\n" + h + "\r\n",
			want: refusalRecord{Protocol: "http", Status: 400, Reason: "bad-request"}},
		{name: "unsupported version", send: "GET " + u + " HTTP/2.0\r\n" + h + "\r\n",
			want: refusalRecord{Protocol: "http", Status: 505, Reason: "bad-request"}},
		{name: "NUL in a header value", send: "GET " + u + " HTTP/1.1\r\n" + h + "X-Secret: " + secret + "\x00\r\n\r\n",
			want: refusalRecord{Protocol: "http", Method: "GET", Target: u, Status: 400, Reason: "bad-request"}},
		{name: "origin-form target", send: "GET /a HTTP/1.1\r\n" + h + "\r\n",
			want: refusalRecord{Protocol: "http", Method: "GET", Target: "/a", Status: 400, Reason: "bad-request"}},
		{name: "userinfo in the target", send: "GET http://alice:" + secret + "@" + r.origin.Addr + "/a HTTP/1.1\r\n" + h + "\r\n",
			want: refusalRecord{Protocol: "http", Method: "GET", Status: 400, Reason: "bad-request"}},
		{name: "userinfo in a target refused for its head", send: "GET http://alice:" + secret + "@" + r.origin.Addr + "/a HTTP/1.1\r\n" + h + "X: \x00\r\n\r\n",
			want: refusalRecord{Protocol: "http", Method: "GET", Status: 400, Reason: "bad-request"}},
		{name: "Content-Length and Transfer-Encoding", send: post + "Content-Length: 12\r\nTransfer-Encoding: chunked\r\n\r\n7\r\n" + secret + "\r\n0\r\n\r\n",
			want: refusalRecord{Protocol: "http", Method: "POST", Target: u, Status: 400, Reason: "smuggling"}},
		{name: "conflicting Content-Length", send: post + "Content-Length: 7\r\nContent-Length: 8\r\n\r\n" + secret,
			want: refusalRecord{Protocol: "http", Method: "POST", Target: u, Status: 400, Reason: "smuggling"}},
		{name: "chunked not last", send: post + "Transfer-Encoding: chunked, identity\r\n\r\n7\r\n" + secret + "\r\n0\r\n\r\n",
			want: refusalRecord{Protocol: "http", Method: "POST", Target: u, Status: 400, Reason: "smuggling"}},
		{name: "obs-fold", send: post + "Transfer-Encoding: identity\r\n chunked\r\n\r\n7\r\n" + secret + "\r\n0\r\n\r\n",
			want: refusalRecord{Protocol: "http", Method: "POST", Target: u, Status: 400, Reason: "smuggling"}},
		{name: "space before colon", send: post + "Transfer-Encoding : chunked\r\n\r\n7\r\n" + secret + "\r\n0\r\n\r\n",
			want: refusalRecord{Protocol: "http", Method: "POST", Target: u, Status: 400, Reason: "smuggling"}},
		{name: "CONNECT with ambiguous framing", send: "CONNECT " + r.origin.Addr + " HTTP/1.1\r\n" + h + "Content-Length: 1\r\nContent-Length: 2\r\n\r\n",
			want: refusalRecord{Protocol: "connect", Method: "CONNECT", Target: r.origin.Addr, Status: 400, Reason: "smuggling"}},
		{name: "head too large", send: tooLarge,
			want: refusalRecord{Protocol: "http", Method: "GET", Target: u, Status: 431, Reason: "head-too-large"}},
		{name: "too many header fields", send: "GET " + u + " HTTP/1.1\r\n" + h + strings.Repeat("X:1\r\n", 300) + "\r\n",
			want: refusalRecord{Protocol: "http", Method: "GET", Target: u, Status: 431, Reason: "head-too-large"}},
		{name: "head not finished in time", send: "GET " + u + " HTTP/1.1\r\n" + h + "X-Secret: " + secret,
			want: refusalRecord{Protocol: "http", Method: "GET", Target: u, Status: 408, Reason: "head-timeout"}},
		{name: "malformed chunked body", send: post + "Transfer-Encoding: chunked\r\n\r\nzz\r\n" + secret + "\r\n0\r\n\r\n",
			want: refusalRecord{Protocol: "http", Method: "POST", Target: u, Status: 400, Reason: "bad-request"}},
		{name: "malformed after a request", before: true, send: "GET " + u + " HTTP/1.1\r\n" + h + "X-Secret: " + secret + "\x00\r\n\r\n",
			want: refusalRecord{Protocol: "http", Method: "GET", Target: u, Status: 400, Reason: "bad-request"}},
		{name: "nothing sent", want: refusalRecord{}},
		{name: "idle after a request", before: true, want: refusalRecord{}},
	}
	for _, listener := range []string{"plain", "tls", "mixed"} {
		t.Run(listener, func(t *testing.T) {
			t.Parallel()
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					t.Parallel()
					c := r.dial(t, listener)
					client := c.LocalAddr().String()
					br := bufio.NewReader(c)
					n := 0 // records before the refusal's
					if tt.before {
						io.WriteString(c, "GET "+r.origin.URL("/first")+" HTTP/1.1\r\n"+h+"\r\n")
						if st := readStatus(t, br); st != 200 {
							t.Fatalf("the first request: %d", st)
						}
						n = 1
					}
					if tt.send == "" {
						// Closed when the wait for a request ends, without
						// a record or an answer.
						if st := readStatus(t, br); st != 0 {
							t.Fatalf("answered %d, want a close", st)
						}
						r.marker(t)
						if recs := r.records(t, client); len(recs) != n {
							t.Errorf("records %+v, want %d", recs, n)
						}
						if lines := r.debugLines(client); len(lines) != 0 {
							t.Errorf("debug lines %q, want none", lines)
						}
						return
					}
					go io.WriteString(c, tt.send) // the answer may come before all is written
					if st := readStatus(t, br); st != tt.want.Status {
						t.Errorf("answered %d, want %d", st, tt.want.Status)
					}
					recs := r.waitRecords(t, client, n+1)
					if n == 1 && (recs[0].Status != 200 || recs[0].Reason != "") {
						t.Errorf("the first request's record %+v", recs[0])
					}
					want := tt.want
					want.Listener, want.Client = listener, client
					if got := recs[n]; got != want {
						t.Errorf("record %+v, want %+v", got, want)
					}
					r.marker(t)
					if recs := r.records(t, client); len(recs) != n+1 {
						t.Errorf("%d records, want %d: %+v", len(recs), n+1, recs)
					}
					r.checkDebug(t, client, want)
				})
			}
		})
	}
	t.Cleanup(func() { r.checkNoSecret(t) })
}

// marker makes a refusal on a connection of its own and waits for its
// record: once it is written, every record queued before it is too.
func (r *refusalRig) marker(t *testing.T) {
	t.Helper()
	c := r.dial(t, "plain")
	io.WriteString(c, "GET / HTTP/1.1\r\n\r\n")
	readStatus(t, bufio.NewReader(c))
	r.waitRecords(t, c.LocalAddr().String(), 1)
}

// TestTLSPortRefusalsLogged checks the records of what fails on the TLS
// port before a request: a failed handshake (status 0, the server name
// the hello asked for as the target, whether the handshake failed before
// or after reading it), plain HTTP and other bytes that are not TLS, and
// an HTTP/2 request and connection that break the protocol.
func TestTLSPortRefusalsLogged(t *testing.T) {
	r := startRefusalRig(t, accesslog.FormatJSON)
	refuse := func(tls.ConnectionState) error { return errors.New("test client refuses the certificate") }
	tests := []struct {
		name string
		// talk speaks to the listener over c and checks the answer.
		talk func(t *testing.T, c net.Conn)
		want refusalRecord
	}{
		{"handshake: certificate not trusted", func(t *testing.T, c net.Conn) {
			expectHandshakeError(t, tls.Client(c, &tls.Config{ServerName: "sni.example", RootCAs: x509.NewCertPool()}))
		}, refusalRecord{Target: "sni.example", Reason: "tls-handshake"}},
		{"handshake: no server name", func(t *testing.T, c net.Conn) {
			expectHandshakeError(t, tls.Client(c, &tls.Config{InsecureSkipVerify: true, VerifyConnection: refuse}))
		}, refusalRecord{Reason: "tls-handshake"}},
		{"handshake: no common version", func(t *testing.T, c net.Conn) {
			expectHandshakeError(t, tls.Client(c, &tls.Config{ServerName: "old.example", MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11}))
		}, refusalRecord{Target: "old.example", Reason: "tls-handshake"}},
		{"handshake: not a hello", func(t *testing.T, c net.Conn) {
			io.WriteString(c, "\x16\x03\x01\x00\x05"+secret[:5])
			io.Copy(io.Discard, c)
		}, refusalRecord{Reason: "tls-handshake"}},
		{"plain HTTP", func(t *testing.T, c net.Conn) {
			io.WriteString(c, "GET http://example.test/ HTTP/1.1\r\nHost: example.test\r\nX-Secret: "+secret+"\r\n\r\n")
			if st := readStatus(t, bufio.NewReader(c)); st != 400 {
				t.Errorf("answered %d, want 400", st)
			}
		}, refusalRecord{Status: 400, Reason: "not-tls"}},
		{"not TLS, not HTTP", func(t *testing.T, c net.Conn) {
			io.WriteString(c, "\x05\x01\x00")
			if b, _ := io.ReadAll(c); len(b) != 0 {
				t.Errorf("answered %q, want a close", b)
			}
		}, refusalRecord{Reason: "not-tls"}},
		{"h2: malformed request", func(t *testing.T, c net.Conn) {
			fr := startH2(t, r, c)
			writeH2Headers(t, fr, 1, ":method", "GET", ":scheme", "http", ":authority", "example.test", "x-secret", secret)
			if f := nextH2(t, fr); !isH2RST(f, 1, http2.ErrCodeProtocol) {
				t.Errorf("answered %v, want RST_STREAM(PROTOCOL_ERROR)", f)
			}
		}, refusalRecord{Protocol: "h2", Method: "GET", Reason: "protocol"}},
		{"h2: connection error", func(t *testing.T, c net.Conn) {
			fr := startH2(t, r, c)
			fr.WriteRSTStream(9, http2.ErrCodeCancel) // an idle stream
			if g, ok := nextH2(t, fr).(*http2.GoAwayFrame); !ok || g.ErrCode != http2.ErrCodeProtocol {
				t.Errorf("answered %v, want GOAWAY(PROTOCOL_ERROR)", g)
			}
		}, refusalRecord{Protocol: "h2", Reason: "protocol"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// From an address of its own: its parallel siblings' records
			// are matched by the client's address and port, and loopback
			// reuses a closed connection's port.
			c := r.dialTCP(t, "tls")
			client := c.LocalAddr().String()
			tt.talk(t, c)
			recs := r.waitRecords(t, client, 1)
			want := tt.want
			want.Listener, want.Client = "tls", client
			if recs[0] != want {
				t.Errorf("record %+v, want %+v", recs[0], want)
			}
			c.Close()
			r.marker(t)
			if recs := r.records(t, client); len(recs) != 1 {
				t.Errorf("%d records, want 1: %+v", len(recs), recs)
			}
			r.checkDebug(t, client, want)
		})
	}
	t.Cleanup(func() { r.checkNoSecret(t) })
}

// TestTLSToPlainPort checks that a client starting a TLS handshake on a
// port that speaks plain HTTP (an https:// proxy URL for an http or mixed
// listener) is refused at once, not after the read-header timeout with a
// plaintext 408 it cannot read: answered with a TLS handshake_failure
// alert, which Go's TLS client and curl report as such, logged with the
// reason tls-to-plain-port in the access log and at debug.
func TestTLSToPlainPort(t *testing.T) {
	r := startRefusalRig(t, accesslog.FormatJSON)
	const headTimeout = 2 * time.Second // the rig's timeouts.read_header
	for _, listener := range []string{"plain", "mixed"} {
		t.Run(listener, func(t *testing.T) {
			t.Run("Go TLS client", func(t *testing.T) {
				c := r.dial(t, listener)
				client := c.LocalAddr().String()
				start := time.Now()
				err := tls.Client(c, &tls.Config{ServerName: "proxy.example", RootCAs: r.roots}).Handshake()
				if took := time.Since(start); took >= headTimeout {
					t.Errorf("the handshake failed after %v, not at once", took)
				}
				if err == nil || !strings.Contains(err.Error(), "remote error: tls: handshake failure") {
					t.Errorf("handshake: %v, want the server's handshake_failure alert", err)
				}
				recs := r.waitRecords(t, client, 1)
				want := refusalRecord{Listener: listener, Client: client, Reason: "tls-to-plain-port"}
				if recs[0] != want {
					t.Errorf("record %+v, want %+v", recs[0], want)
				}
				r.checkDebug(t, client, want)
			})
			t.Run("curl", func(t *testing.T) {
				start := time.Now()
				out, err := curl(t, "--proxy", "https://"+r.addr[listener], "--proxy-insecure", r.origin.URL("/curl"))
				took := time.Since(start)
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.ExitCode() != 35 || !strings.Contains(out, "alert handshake failure") {
					t.Errorf("curl: %v %q, want exit 35 (TLS connect error) naming the handshake_failure alert", err, out)
				}
				if took >= headTimeout {
					t.Errorf("curl failed after %v, not at once", took)
				}
				waitFor(t, "curl's record", func() bool {
					for line := range strings.Lines(r.access.String()) {
						var rec refusalRecord
						if json.Unmarshal([]byte(line), &rec) == nil && rec.Listener == listener &&
							rec.Reason == "tls-to-plain-port" && strings.HasPrefix(rec.Client, "127.0.0.1:") {
							return true
						}
					}
					return false
				})
			})
		})
	}
}

// expectHandshakeError runs tc's handshake, which must fail.
func expectHandshakeError(t *testing.T, tc *tls.Conn) {
	t.Helper()
	if err := tc.Handshake(); err == nil {
		t.Fatal("the handshake succeeded")
	}
	tc.Close()
}

// startH2 makes c an HTTP/2 connection to the rig's TLS listener and
// returns its framer, the preface and SETTINGS sent.
func startH2(t *testing.T, r *refusalRig, c net.Conn) *http2.Framer {
	t.Helper()
	tc := tls.Client(c, &tls.Config{RootCAs: r.roots, ServerName: "localhost", NextProtos: []string{"h2"}})
	if err := tc.Handshake(); err != nil || tc.ConnectionState().NegotiatedProtocol != "h2" {
		t.Fatalf("TLS handshake for h2: %v, ALPN %q", err, tc.ConnectionState().NegotiatedProtocol)
	}
	fr := http2.NewFramer(tc, tc)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	io.WriteString(tc, http2.ClientPreface)
	fr.WriteSettings()
	return fr
}

// writeH2Headers sends a HEADERS frame ending stream id with fields.
func writeH2Headers(t *testing.T, fr *http2.Framer, id uint32, fields ...string) {
	t.Helper()
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	for i := 0; i+1 < len(fields); i += 2 {
		enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: buf.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
}

// nextH2 returns the next frame but SETTINGS, WINDOW_UPDATE and PING.
func nextH2(t *testing.T, fr *http2.Framer) http2.Frame {
	t.Helper()
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("read frame: %v", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
			continue
		case *http2.WindowUpdateFrame, *http2.PingFrame:
			continue
		}
		return f
	}
}

// isH2RST reports whether f is RST_STREAM of stream id with code.
func isH2RST(f http2.Frame, id uint32, code http2.ErrCode) bool {
	r, ok := f.(*http2.RSTStreamFrame)
	return ok && r.StreamID == id && r.ErrCode == code
}

// TestRefusalTextFormat checks a refusal's line in the text format: 14
// fields, the reason the last.
func TestRefusalTextFormat(t *testing.T) {
	r := startRefusalRig(t, accesslog.FormatText)
	c := r.dial(t, "plain")
	u := r.origin.URL("/a")
	io.WriteString(c, "POST "+u+" HTTP/1.1\r\nHost: "+r.origin.Addr+"\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
	if st := readStatus(t, bufio.NewReader(c)); st != 400 {
		t.Fatalf("answered %d, want 400", st)
	}
	hs, err := net.Dial("tcp", r.addr["tls"])
	if err != nil {
		t.Fatal(err)
	}
	defer hs.Close()
	hs.SetDeadline(time.Now().Add(10 * time.Second))
	expectHandshakeError(t, tls.Client(hs, &tls.Config{ServerName: "sni.example", RootCAs: x509.NewCertPool()}))
	waitFor(t, "two access log lines", func() bool { return strings.Count(r.access.String(), "\n") >= 2 })
	lines := map[string][]string{}
	for line := range strings.Lines(r.access.String()) {
		f := strings.Split(strings.TrimSuffix(line, "\n"), " ")
		if len(f) > 2 {
			lines[f[2]] = f
		}
	}
	for _, tt := range []struct {
		client string
		want   map[int]string // field index: value
	}{
		{c.LocalAddr().String(), map[int]string{1: "plain", 4: "http", 5: "POST", 6: u, 7: "400", 13: "smuggling"}},
		{hs.LocalAddr().String(), map[int]string{1: "tls", 4: "-", 5: "-", 6: "sni.example", 7: "0", 13: "tls-handshake"}},
	} {
		f := lines[tt.client]
		if len(f) != 14 {
			t.Errorf("line of %s: %q, want 14 fields", tt.client, f)
			continue
		}
		for i, v := range tt.want {
			if f[i] != v {
				t.Errorf("line of %s: field %d = %q, want %q (%q)", tt.client, i+1, f[i], v, f)
			}
		}
	}
}
