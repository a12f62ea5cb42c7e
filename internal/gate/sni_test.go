package gate_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/proxytest"
	"github.com/rustle-proxy/rustle/internal/route"
	"github.com/rustle-proxy/rustle/internal/sni"
)

// helloFor returns what sni.Parse reads of the Go client's ClientHello
// naming name ("" or an address: none).
func helloFor(t *testing.T, name string) sni.Hello {
	t.Helper()
	h, _, err := sni.Parse(proxytest.ClientHello(t, &tls.Config{ServerName: name, InsecureSkipVerify: true}))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestCheckHello decides tunnels with the SNI check in every mode, for
// a CONNECT to a name and to an address, with what their first bytes
// were: a hello naming the host (case and a trailing dot aside),
// another, none, or no hello at all; the listener's mode and a rule's;
// rules and routes on sni_hosts.
func TestCheckHello(t *testing.T) {
	rules := []acl.Rule{
		{Name: "exempt", Action: acl.Allow, Hosts: []string{"ssh.example"}, SNI: "off"},
		{Name: "strict", Action: acl.Allow, Hosts: []string{"strict.example"}, SNI: "match"},
		{Name: "no-fronted", Action: acl.Deny, SNIHosts: []string{".blocked.example"}},
		{Name: "ip-names", Action: acl.Deny, Hosts: []string{"bad.example"}},
		{Name: "rest", Action: acl.Allow},
	}
	notTLS := fmt.Errorf("bytes: %w", sni.ErrNotTLS)
	tests := []struct {
		name      string
		listener  sni.Mode
		rules     []acl.Rule
		req       *gate.Request
		hello     string // the hello's server name
		err       error  // what reading it gave instead
		needs     bool
		want      gate.Kind
		wantSNI   string
		wantRule  string
		wantRoute string
	}{
		{name: "off: nothing read", listener: sni.Off, req: connectReq("api.example", nil)},
		{name: "unset is off", listener: sni.Unset, req: connectReq("api.example", nil)},
		{name: "plain HTTP is no tunnel", listener: sni.Match, req: &gate.Request{Protocol: acl.HTTP, Method: "GET", Host: "api.example", Port: 80}},
		{name: "a WebSocket neither", listener: sni.Match, req: &gate.Request{Protocol: acl.WebSocket, Method: "GET", Host: "api.example", Port: 80}},
		{name: "log: another name passes", listener: sni.Log, req: connectReq("api.example", nil), hello: "other.example",
			needs: true, want: gate.OK, wantSNI: "other.example"},
		{name: "log: not TLS passes", listener: sni.Log, req: connectReq("api.example", nil), err: notTLS,
			needs: true, want: gate.OK, wantSNI: "[not-tls]"},
		{name: "match: the same name", listener: sni.Match, req: connectReq("api.example", nil), hello: "api.example",
			needs: true, want: gate.OK, wantSNI: "api.example"},
		{name: "match: case and a trailing dot aside", listener: sni.Match, req: connectReq("API.Example.", nil), hello: "api.EXAMPLE",
			needs: true, want: gate.OK, wantSNI: "api.EXAMPLE"},
		{name: "match: another name", listener: sni.Match, req: connectReq("api.example", nil), hello: "fronted.example",
			needs: true, want: gate.SNIMismatch, wantSNI: "fronted.example"},
		{name: "match: a suffix is another name", listener: sni.Match, req: connectReq("example", nil), hello: "api.example",
			needs: true, want: gate.SNIMismatch, wantSNI: "api.example"},
		{name: "match: no name where the CONNECT named a host", listener: sni.Match, req: connectReq("api.example", nil), hello: "",
			needs: true, want: gate.SNIMismatch, wantSNI: "[no-sni]"},
		{name: "match: not TLS", listener: sni.Match, req: connectReq("api.example", nil), err: notTLS,
			needs: true, want: gate.SNIMismatch, wantSNI: "[not-tls]"},
		{name: "match: SSLv2", listener: sni.Match, req: connectReq("api.example", nil), err: sni.ErrSSLv2,
			needs: true, want: gate.SNIMismatch, wantSNI: "[not-tls]"},
		{name: "match: malformed", listener: sni.Match, req: connectReq("api.example", nil), err: fmt.Errorf("%w: x", sni.ErrMalformed),
			needs: true, want: gate.SNIMismatch, wantSNI: "[malformed]"},
		{name: "match: too large", listener: sni.Match, req: connectReq("api.example", nil), err: sni.ErrTooLarge,
			needs: true, want: gate.SNIMismatch, wantSNI: "[too-large]"},
		{name: "match: timed out", listener: sni.Match, req: connectReq("api.example", nil), err: os.ErrDeadlineExceeded,
			needs: true, want: gate.SNIMismatch, wantSNI: "[incomplete]"},
		{name: "match: closed early", listener: sni.Match, req: connectReq("api.example", nil), err: io.ErrUnexpectedEOF,
			needs: true, want: gate.SNIMismatch, wantSNI: "[incomplete]"},
		{name: "match: an address without a name", listener: sni.Match, req: connectReq("192.0.2.7", nil), hello: "",
			needs: true, want: gate.OK, wantSNI: "[no-sni]"},
		{name: "match: an address and a name, no rules", listener: sni.Match, req: connectReq("192.0.2.7", nil), hello: "any.example",
			needs: true, want: gate.OK, wantSNI: "any.example"},
		{name: "match: an address and a name the rules allow", listener: sni.Match, rules: rules, req: connectReq("192.0.2.7", nil), hello: "good.example",
			needs: true, want: gate.OK, wantSNI: "good.example", wantRule: "rest"},
		{name: "match: an address and a name the rules refuse", listener: sni.Match, rules: rules, req: connectReq("192.0.2.7", nil), hello: "bad.example",
			needs: true, want: gate.SNIMismatch, wantSNI: "bad.example", wantRule: "ip-names"},
		{name: "match: a SOCKS address and a refused name", listener: sni.Match, rules: rules,
			req:   &gate.Request{Protocol: acl.SOCKS5, Method: "CONNECT", Addr: netip.MustParseAddr("2001:db8::7"), Port: 443},
			hello: "bad.example", needs: true, want: gate.SNIMismatch, wantSNI: "bad.example", wantRule: "ip-names"},
		{name: "a rule's off wins over the listener's match", listener: sni.Match, rules: rules, req: connectReq("ssh.example", nil)},
		{name: "a rule's match wins over the listener's off", listener: sni.Off, rules: rules, req: connectReq("strict.example", nil), hello: "other.example",
			needs: true, want: gate.SNIMismatch, wantSNI: "other.example", wantRule: "strict"},
		{name: "sni_hosts read the hello whatever the mode", listener: sni.Off, rules: rules, req: connectReq("cdn.example", nil), hello: "www.blocked.example",
			needs: true, want: gate.Denied, wantSNI: "www.blocked.example", wantRule: "no-fronted"},
		{name: "sni_hosts: another name goes on to the next rule", listener: sni.Off, rules: rules, req: connectReq("cdn.example", nil), hello: "www.ok.example",
			needs: true, want: gate.OK, wantSNI: "www.ok.example", wantRule: "rest"},
		{name: "sni_hosts: no hello at all matches none", listener: sni.Off, rules: rules, req: connectReq("cdn.example", nil), err: notTLS,
			needs: true, want: gate.OK, wantSNI: "[not-tls]", wantRule: "rest"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := proxytest.NewPolicy(t, proxytest.PolicyConfig{Rules: tt.rules})
			p.SNI = tt.listener
			var g gate.Grant
			if k := newSession(t, p).Authorize(tt.req, &g); k != gate.OK {
				t.Fatalf("Authorize: %v", k)
			}
			defer g.Finish(0, 0)
			if g.NeedsHello() != tt.needs {
				t.Fatalf("NeedsHello = %v, want %v", g.NeedsHello(), tt.needs)
			}
			if !tt.needs {
				return
			}
			var h sni.Hello
			if tt.err == nil {
				h = helloFor(t, tt.hello)
			}
			if k := g.CheckHello(h, tt.err); k != tt.want {
				t.Errorf("CheckHello = %v, want %v", k, tt.want)
			}
			if g.SNI() != tt.wantSNI || g.Rule != tt.wantRule {
				t.Errorf("SNI %q rule %q, want %q %q", g.SNI(), g.Rule, tt.wantSNI, tt.wantRule)
			}
		})
	}
}

// TestCheckHelloRoutesAndEgress: a route and an egress rule on
// sni_hosts make a tunnel read its hello whatever the mode, and are
// chosen by its server name.
func TestCheckHelloRoutesAndEgress(t *testing.T) {
	p := proxytest.NewPolicy(t, proxytest.PolicyConfig{Users: users})
	tab, err := route.New(proxytest.RouteDefaults(route.Config{
		Parents: []route.ParentConfig{{Name: "squid", URL: "http://127.0.0.1:3128"}},
		Routes: []route.RouteConfig{
			{Name: "cdn-via-squid", Match: acl.Rule{SNIHosts: []string{"*.cdn.example"}}, Via: []string{"squid"}},
			{Name: "tls-direct", Match: acl.Rule{Ports: []string{"443"}}, Via: []string{route.Direct}},
		},
	}))
	if err != nil {
		t.Fatal(err)
	}
	p.Routes = tab
	names, err := acl.NewSNINames([]string{"api.example"})
	if err != nil {
		t.Fatal(err)
	}
	src, err := dialer.NewSource(dialer.SourceConfig{Bind: []string{"127.0.0.2"}, Freebind: true})
	if err != nil {
		t.Fatal(err)
	}
	p.Egress = &gate.Egress{Rules: []gate.EgressRule{{Who: acl.NewSelector(acl.Who{Users: []string{"bob"}}, nil, nil), Source: src, SNI: names}}}
	s := newSession(t, p)
	for _, tt := range []struct {
		user, hello string
		route       string
		source      bool
	}{
		{"alice", "www.cdn.example", "cdn-via-squid", false},
		{"alice", "api.example", "tls-direct", false},
		{"bob", "api.example", "tls-direct", true},
		{"bob", "www.cdn.example", "cdn-via-squid", false},
	} {
		t.Run(tt.user+" "+tt.hello, func(t *testing.T) {
			var g gate.Grant
			if k := s.Authorize(connectReq("origin.example", basicAuth(tt.user, users[tt.user])), &g); k != gate.OK {
				t.Fatalf("Authorize: %v", k)
			}
			defer g.Finish(0, 0)
			if !g.NeedsHello() {
				t.Fatal("NeedsHello false with a route on sni_hosts")
			}
			if k := g.CheckHello(helloFor(t, tt.hello), nil); k != gate.OK {
				t.Fatalf("CheckHello: %v", k)
			}
			if g.Route().Name() != tt.route {
				t.Errorf("route %q, want %q", g.Route().Name(), tt.route)
			}
			if got := g.DialOptions().Source == src; got != tt.source {
				t.Errorf("the egress rule's source: %v, want %v", got, tt.source)
			}
		})
	}
	// A plain request never matches a route or egress rule on sni_hosts,
	// and reads nothing.
	var g gate.Grant
	r := &gate.Request{Protocol: acl.HTTP, Method: "GET", Host: "www.cdn.example", Port: 443, Authorization: basicAuth("bob", users["bob"])}
	if k := s.Authorize(r, &g); k != gate.OK || g.NeedsHello() || g.Route().Name() != "tls-direct" || g.DialOptions().Source == src {
		t.Errorf("plain GET: %v needs %v route %q", k, g.NeedsHello(), g.Route().Name())
	}
	g.Finish(0, 0)
}

// TestReadHello reads tunnels' first bytes from a connection as the
// SOCKS and HTTP/3 front-ends do: a hello in one-byte records sent a
// byte at a time, one over the bound, an SSLv2 hello, garbage, and a
// client that sends nothing within the timeout; the bytes read come
// back whole for the origin, and the access log and metrics say what
// the check found.
func TestReadHello(t *testing.T) {
	hello := proxytest.ClientHello(t, &tls.Config{ServerName: "api.example"})
	frag := proxytest.HelloRecords(proxytest.HelloMessage(t, hello), 1)
	big := proxytest.HelloRecords(append(proxytest.HelloMessage(t, hello), make([]byte, sni.MaxBytes)...), 1<<14)
	tests := []struct {
		name      string
		send      []byte
		trickle   bool
		want      gate.Kind
		wantSNI   string
		wantBytes int // of send read; -1 = all
	}{
		{"whole", hello, false, gate.OK, "api.example", -1},
		{"one-byte records a byte at a time", frag, true, gate.OK, "api.example", -1},
		{"over the bound", big, false, gate.SNIMismatch, "[too-large]", 0},
		{"SSLv2", []byte{0x80, 0x2e, 0x01, 0x03, 0x01, 0x00, 0x15, 0x00, 0x00, 0x00, 0x10}, false, gate.SNIMismatch, "[not-tls]", -1},
		{"garbage", []byte("SSH-2.0-OpenSSH_9.2\r\n"), false, gate.SNIMismatch, "[not-tls]", -1},
		{"nothing in time", nil, false, gate.SNIMismatch, "[incomplete]", -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := proxytest.PolicyConfig{}
			o := observe(t, &cfg)
			p := proxytest.NewPolicy(t, cfg)
			p.SNI, p.HelloTimeout = sni.Match, 300*time.Millisecond
			client, server := net.Pipe()
			defer client.Close()
			defer server.Close()
			go func() {
				if tt.trickle {
					for i := range tt.send {
						if _, err := client.Write(tt.send[i : i+1]); err != nil {
							return
						}
					}
				} else if len(tt.send) > 0 {
					client.Write(tt.send)
				}
				io.Copy(io.Discard, client)
			}()
			var g gate.Grant
			s := newSession(t, p)
			if k := s.Authorize(connectReq("api.example", nil), &g); k != gate.OK || !g.NeedsHello() {
				t.Fatalf("Authorize: %v, needs the hello %v", k, g.NeedsHello())
			}
			g.Answer(200, 0)
			got, k := g.ReadHello(server, nil)
			if k != tt.want || g.SNI() != tt.wantSNI {
				t.Fatalf("ReadHello: %v %q, want %v %q", k, g.SNI(), tt.want, tt.wantSNI)
			}
			switch {
			case tt.wantBytes < 0 && string(got) != string(tt.send):
				t.Errorf("read %d bytes, want the %d sent", len(got), len(tt.send))
			case tt.wantBytes >= 0 && len(got) > sni.MaxBytes:
				t.Errorf("read %d bytes: over the bound", len(got))
			}
			g.Finish(int64(len(got)), 0)
			rec := o.records(t, 1)[0]
			if rec["sni"] != tt.wantSNI || (tt.want == gate.OK) != (rec["reason"] == nil) {
				t.Errorf("access log record %v", rec)
			}
			if tt.want != gate.OK && rec["reason"] != accesslog.ReasonSNIMismatch {
				t.Errorf("reason %v, want %s", rec["reason"], accesslog.ReasonSNIMismatch)
			}
			result := strings.Trim(tt.wantSNI, "[]")
			if tt.want == gate.OK {
				result = "matched"
			}
			if n := proxytest.Metric(t, o.m, "rustle_sni_checks_total", "listener", "test", "result", result); n != 1 {
				t.Errorf("rustle_sni_checks_total{result=%q} = %v, want 1", result, n)
			}
			refused := 0.0
			if tt.want != gate.OK {
				refused = 1
			}
			if n := proxytest.Metric(t, o.m, "rustle_sni_refusals_total", "listener", "test"); n != refused {
				t.Errorf("rustle_sni_refusals_total = %v, want %v", n, refused)
			}
		})
	}
}

// TestNeedsHelloAllocs: deciding whether a tunnel reads its hello costs
// a keep-alive Authorize no allocation.
func TestNeedsHelloAllocs(t *testing.T) {
	p := proxytest.NewPolicy(t, proxytest.PolicyConfig{Rules: []acl.Rule{
		{Name: "fronted", Action: acl.Deny, SNIHosts: []string{"blocked.example"}, Ports: []string{"8443"}},
		{Name: "all", Action: acl.Allow},
	}})
	p.SNI = sni.Log
	s := newSession(t, p)
	var g gate.Grant
	r := connectReq("api.example", nil)
	if n := testing.AllocsPerRun(100, func() {
		s.Authorize(r, &g)
		g.NeedsHello()
		g.Finish(0, 0)
	}); n != 0 {
		t.Errorf("Authorize of a tunnel with the SNI check allocates %v times", n)
	}
	if !errors.Is(fmt.Errorf("x: %w", sni.ErrNotTLS), sni.ErrNotTLS) {
		t.Fatal("unreachable")
	}
}

// BenchmarkCheckHello is the SNI check's own work per tunnel, beside
// the decision every tunnel costs: Authorize of a CONNECT (off), and
// Authorize, the parse of a browser-sized ClientHello and CheckHello
// (match). The syscalls the check moves (a read and a write of the
// hello instead of two splices) are measured with the binary by e2e's
// BenchmarkSNICheck.
func BenchmarkCheckHello(b *testing.B) {
	hello := proxytest.ClientHello(b, &tls.Config{ServerName: "api.example", NextProtos: []string{"h2", "http/1.1"}})
	for _, mode := range []sni.Mode{sni.Off, sni.Match} {
		b.Run(mode.String(), func(b *testing.B) {
			p := proxytest.NewPolicy(b, proxytest.PolicyConfig{Rules: []acl.Rule{{Name: "all", Action: acl.Allow}}})
			p.SNI = mode
			s := p.NewSession(context.Background(), netip.MustParseAddrPort("127.0.0.1:40000"), nil, nil)
			defer s.Close()
			r := connectReq("api.example", nil)
			var g gate.Grant
			b.ReportAllocs()
			for b.Loop() {
				if s.Authorize(r, &g) != gate.OK {
					b.Fatal("refused")
				}
				if g.NeedsHello() {
					var sc sni.Scanner
					h, _, err := sc.Scan(hello)
					if g.CheckHello(h, err) != gate.OK {
						b.Fatal("check refused")
					}
				}
				g.Answer(200, 0)
				g.Finish(0, 0)
			}
		})
	}
}
