package server

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/proxyproto"
)

// TestProxyProtocolFrom checks proxy_protocol_from: a connection from a
// listed peer (an address or a prefix) is served as the address its
// PROXY header (v1 or v2) carries; one from any other peer is closed
// before it is read, header or not, and logged at info level with the
// peer and the listener; a listener without the key takes the header
// from every peer. The untrusted peer is 127.0.0.2, the client socket
// bound to it.
func TestProxyProtocolFrom(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "xff="+r.Header.Get("X-Forwarded-For"))
	}))
	t.Cleanup(origin.Close)

	cfg := config.Default()
	cfg.Workers = 1
	cfg.Forwarded = "x-forwarded-for"
	cfg.Timeouts.ReadHeader.Duration = 2 * time.Second
	cfg.AllowPrivate = []string{"127.0.0.0/8"}
	cfg.Listen = []config.Listener{
		{Name: "lb", Address: "127.0.0.1:0", Protocol: "mixed", Auth: config.AuthNone, ProxyProtocol: true,
			ProxyProtocolFrom: []string{"10.0.0.0/8", "127.0.0.1"}},
		{Name: "lb-net", Address: "127.0.0.1:0", Protocol: "http", Auth: config.AuthNone, ProxyProtocol: true,
			ProxyProtocolFrom: []string{"127.0.0.2/31"}},
		{Name: "lb-any", Address: "127.0.0.1:0", Protocol: "http", Auth: config.AuthNone, ProxyProtocol: true},
	}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	logs, access := &logBuffer{}, &logBuffer{}
	_, addrs := startLogged(t, cfg, slog.New(slog.NewTextHandler(logs, nil)), access)

	header := func(t *testing.T, version int, src string) []byte {
		t.Helper()
		h := proxyproto.Header{Version: version, Command: proxyproto.CommandProxy,
			Source: netip.MustParseAddrPort(src), Destination: netip.MustParseAddrPort("127.0.0.1:3128")}
		b, err := h.Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	tests := []struct {
		name     string
		listener string
		from     string // the client socket's address
		first    []byte // sent before the request
		wantXFF  string // "" = closed without an answer
		wantLog  bool   // refused as a peer outside proxy_protocol_from
	}{
		{"listed address, v1", "lb", "127.0.0.1", header(t, 1, "203.0.113.7:40001"), "203.0.113.7", false},
		{"listed address, v2", "lb", "127.0.0.1", header(t, 2, "203.0.113.8:40002"), "203.0.113.8", false},
		{"listed address, no header", "lb", "127.0.0.1", nil, "", false},
		{"unlisted, v1", "lb", "127.0.0.2", header(t, 1, "203.0.113.9:40003"), "", true},
		{"unlisted, v2", "lb", "127.0.0.2", header(t, 2, "203.0.113.9:40004"), "", true},
		{"unlisted, no header", "lb", "127.0.0.2", nil, "", true},
		{"listed prefix, v2", "lb-net", "127.0.0.3", header(t, 2, "203.0.113.10:40005"), "203.0.113.10", false},
		{"unlisted by the prefix, v1", "lb-net", "127.0.0.1", header(t, 1, "203.0.113.11:40006"), "", true},
		{"no list, v1 from anyone", "lb-any", "127.0.0.2", header(t, 1, "203.0.113.12:40007"), "203.0.113.12", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := logs.String()
			d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(tt.from)}}
			c, err := d.Dial("tcp", addrs[tt.listener])
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			local := c.LocalAddr().String()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			req := "GET " + origin.URL + "/p HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
			c.Write(append(tt.first, req...)) // may fail: an unlisted peer is closed at once
			got, err := io.ReadAll(c)
			if err != nil && !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("read: %v", err)
			}
			if tt.wantXFF == "" {
				if len(got) != 0 {
					t.Fatalf("got %q, want the connection closed without an answer", got)
				}
			} else if !strings.HasPrefix(string(got), "HTTP/1.1 200") || !strings.HasSuffix(string(got), "xff="+tt.wantXFF) {
				t.Fatalf("got %q, want a 200 for the header's client %s", got, tt.wantXFF)
			}
			line := `msg="server: connection to a PROXY protocol listener from a peer outside proxy_protocol_from; closed" listener=` +
				tt.listener + " peer=" + local
			if tt.wantLog {
				// Among the lines since the row began: an earlier row's
				// connection from the address may have had the port.
				since := func() string { return strings.TrimPrefix(logs.String(), before) }
				waitFor(t, "the log line "+line, func() bool { return strings.Contains(since(), line) })
				if !strings.Contains(since(), "level=INFO "+line) {
					t.Errorf("log %q: want the refusal at info level", logs.String())
				}
			} else if l := strings.TrimPrefix(logs.String(), before); strings.Contains(l, "proxy_protocol_from; closed") {
				t.Errorf("a connection from a listed peer logged %q", l)
			}
		})
	}

	// What got through was logged as the header's client.
	waitFor(t, "the access log lines", func() bool { return strings.Count(access.String(), "\n") >= 4 })
	for _, l := range strings.Split(strings.TrimSpace(access.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatal(err)
		}
		if c, _ := rec["client"].(string); !strings.HasPrefix(c, "203.0.113.") {
			t.Errorf("access log record %v: want a client from a header", rec)
		}
	}

	// Start warned about the listener that takes the header from anyone.
	if want := `level=WARN msg="listener takes a PROXY protocol header, and so a client address, from any peer; ` +
		`list the balancers in proxy_protocol_from" listener=lb-any`; !strings.Contains(logs.String(), want) {
		t.Errorf("log %q lacks %q", logs.String(), want)
	}
	if n := strings.Count(logs.String(), "from any peer"); n != 1 {
		t.Errorf("%d warnings about a listener trusting any peer, want 1 (lb-any)", n)
	}
}

// TestReloadProxyProtocolFrom checks that a reload changing
// proxy_protocol_from applies to new connections.
func TestReloadProxyProtocolFrom(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	t.Cleanup(origin.Close)
	withFrom := func(from ...string) *config.Config {
		return reloadConfig(t, func(c *config.Config) {
			c.Listen = []config.Listener{{Name: "lb", Address: "127.0.0.1:0", Auth: config.AuthNone,
				ProxyProtocol: true, ProxyProtocolFrom: from}}
		})
	}
	s := startReloadable(t, withFrom("127.0.0.1"))
	addr := addrOf(s, "lb")
	h := proxyproto.Header{Version: 1, Command: proxyproto.CommandProxy,
		Source: netip.MustParseAddrPort("203.0.113.1:4000"), Destination: netip.MustParseAddrPort(addr)}
	first, err := h.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	// served reports whether a GET with the header from the local
	// address from is answered.
	served := func(from string) bool {
		t.Helper()
		d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		c.Write(append(first, "GET "+origin.URL+"/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"...))
		got, _ := io.ReadAll(c)
		return strings.HasPrefix(string(got), "HTTP/1.1 200")
	}
	for _, step := range []struct {
		from     []string
		one, two bool // served from 127.0.0.1, from 127.0.0.2
	}{
		{[]string{"127.0.0.1"}, true, false},
		{[]string{"127.0.0.2"}, false, true},
		{nil, true, true},
	} {
		if err := s.Reload(withFrom(step.from...)); err != nil {
			t.Fatalf("Reload to %q: %v", step.from, err)
		}
		if one, two := served("127.0.0.1"), served("127.0.0.2"); one != step.one || two != step.two {
			t.Errorf("proxy_protocol_from %q: served from 127.0.0.1 %v, from 127.0.0.2 %v; want %v, %v",
				step.from, one, two, step.one, step.two)
		}
	}
}
