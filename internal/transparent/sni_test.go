//go:build unix

package transparent_test

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/httpproxy"
	"github.com/rustle-proxy/rustle/internal/origin"
	"github.com/rustle-proxy/rustle/internal/proxytest"
	"github.com/rustle-proxy/rustle/internal/sni"
	"github.com/rustle-proxy/rustle/internal/transparent"
)

// newHTTPProxy returns the HTTP proxy a transparent Server needs.
func newHTTPProxy(t *testing.T) *httpproxy.Proxy {
	t.Helper()
	oc, err := origin.New(origin.Config{Forwarded: "none", MaxHeaderBytes: 64 << 10, ResponseHeaderTimeout: time.Minute, WriteTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	hp, err := httpproxy.New(httpproxy.Config{Origin: oc, ReadHeaderTimeout: time.Minute, IdleTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return hp
}

// jsonLog returns an access log in the JSON format, and a function that
// returns its records so far.
func jsonLog(t *testing.T) (*accesslog.Logger, func() []map[string]any) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "access.log")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	al, err := accesslog.New(accesslog.Config{Format: accesslog.FormatJSON, Writer: f})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { al.Close() })
	return al, func() []map[string]any {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var recs []map[string]any
		for _, l := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
			if len(l) == 0 {
				continue
			}
			var r map[string]any
			if err := json.Unmarshal(l, &r); err != nil {
				t.Fatalf("access log line %q: %v", l, err)
			}
			recs = append(recs, r)
		}
		return recs
	}
}

// TestSNICheck sends a transparent listener under sni = "match" tunnels
// that the SNI check and the rules on sni_hosts refuse, each before any
// dial: a ClientHello that names no server and one whose name a rule
// denies (an access_denied alert, then the close), and first bytes that
// are no TLS (closed). Each is logged once (nothing was dialled, not
// even the original destination, here the listener itself), with the
// reason, the rule, the sni field and the status 403 (the hello came
// before any answer).
func TestSNICheck(t *testing.T) {
	al, records := jsonLog(t)
	p := proxytest.NewPolicy(t, proxytest.PolicyConfig{
		Listener: "tp", SNI: sni.Match, AccessLog: al, Default: acl.Allow,
		Rules: []acl.Rule{
			{Name: "no-blocked", Action: acl.Deny, SNIHosts: []string{".blocked.example"}},
			{Name: "rest", Action: acl.Allow, Protocols: []string{"transparent"}},
		},
	})
	// TPROXY's original destination is the local address: here the
	// listener's own, which no refused tunnel dials.
	srv, err := transparent.New(transparent.Config{Proxy: newHTTPProxy(t), TProxy: true, FirstBytes: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	addr := proxytest.StartProxy(t, p, func(c *net.TCPConn, s *gate.Session) { srv.ServeConn(c, s) })

	alert := "\x15\x03\x03\x00\x02\x02\x31" // fatal access_denied
	tests := []struct {
		name  string
		first []byte
		// What the client reads before the close.
		answer            string
		reason, rule, sni string
	}{
		{"a hello naming no server", proxytest.ClientHello(t, &tls.Config{InsecureSkipVerify: true}),
			alert, "sni-mismatch", "rest", "[no-sni]"},
		{"a hello naming a server a rule denies", proxytest.ClientHello(t, &tls.Config{ServerName: "www.blocked.example"}),
			alert, "denied", "no-blocked", "www.blocked.example"},
		{"first bytes that are no TLS", []byte("SSH-2.0-OpenSSH_9.2\r\n"),
			"", "sni-mismatch", "rest", "[not-tls]"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := c.Write(tt.first); err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(c)
			if err != nil && !strings.Contains(err.Error(), "reset") {
				t.Fatalf("read: %v", err)
			}
			if string(got) != tt.answer {
				t.Errorf("read %q before the close, want %q", got, tt.answer)
			}
			proxytest.WaitFor(t, "the access log record", func() bool { return len(records()) >= i+1 })
			recs := records()
			if len(recs) != i+1 {
				t.Fatalf("%d records after %d tunnels, want one each: %v", len(recs), i+1, recs)
			}
			r := recs[i]
			if r["protocol"] != "transparent" || r["method"] != "CONNECT" || r["reason"] != tt.reason || r["rule"] != tt.rule ||
				r["sni"] != tt.sni || r["orig_dst"] != addr || r["upstream"] != nil && r["upstream"] != "" {
				t.Errorf("record %v; want reason %s, rule %s, sni %s, orig_dst %s, no upstream", r, tt.reason, tt.rule, tt.sni, addr)
			}
			// No answer was sent: the status is the refusal's.
			if r["status"] != float64(403) {
				t.Errorf("status %v, want 403", r["status"])
			}
		})
	}
}

// TestFirstBytesBound checks that timeouts.client_hello (FirstBytes)
// bounds a connection's first bytes as a whole: a client that sends the
// first byte of a TLS record late within it, and no more, is refused
// (sni = "match": its hello is incomplete) once it has run out, not
// given the whole timeout again from that byte.
func TestFirstBytesBound(t *testing.T) {
	// Seconds, so that the bound below (half of it past it) is not a
	// loaded machine's pause.
	const first = 3 * time.Second
	p := proxytest.NewPolicy(t, proxytest.PolicyConfig{SNI: sni.Match, Default: acl.Allow})
	srv, err := transparent.New(transparent.Config{Proxy: newHTTPProxy(t), TProxy: true, FirstBytes: first})
	if err != nil {
		t.Fatal(err)
	}
	addr := proxytest.StartProxy(t, p, func(c *net.TCPConn, s *gate.Session) { srv.ServeConn(c, s) })
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	c.SetDeadline(start.Add(15 * time.Second))
	time.Sleep(first * 3 / 4) // the client's own pace, not a wait for the server
	if _, err := c.Write([]byte{0x16}); err != nil {
		t.Fatal(err)
	}
	io.ReadAll(c) // the alert, then the close
	// The whole timeout again from the byte would close it at 1.75 times
	// it (5.25 s).
	if took := time.Since(start); took > first*3/2 {
		t.Errorf("closed after %v; want about %v", took.Round(time.Millisecond), first)
	}
}
