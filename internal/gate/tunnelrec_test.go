package gate

import (
	"bytes"
	"context"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/route"
)

// TestTunnelRecordLines checks that the record an engine tunnel keeps
// (tunnelRecord) makes the very record, and so the very line in every
// access log format, that the grant's record made at the hand-over, for
// tunnels with and without each field that may be set: the compact
// record must lose nothing.
func TestTunnelRecordLines(t *testing.T) {
	table, err := route.New(route.Config{
		Parents: []route.ParentConfig{{
			Name: "up", URL: "http://127.0.0.1:3128", ConnectTimeout: time.Second,
			// proxytest.ParentDefaults', which this package's own
			// tests cannot import.
			Health: route.HealthConfig{MaxFails: 3, Window: 10 * time.Second, Cooldown: 30 * time.Second},
		}},
		Routes: []route.RouteConfig{{Name: "via-up", Via: []string{"up"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	rt := &table.Routes()[0]
	parent := table.Parent("up")
	start := time.Date(2026, 12, 6, 18, 40, 1, 234567000, time.UTC)
	client := netip.MustParseAddrPort("192.0.2.7:40123")
	up := netip.MustParseAddrPort("198.51.100.9:443")
	base := func(g *Grant) {
		g.User, g.account = "alice", "alice"
		g.proto = accesslog.ProtoHTTP
		g.method, g.target = "CONNECT", []byte("example.com:443")
		g.status, g.class = 200, 200
		g.upstream = up
		g.Rule = "staff"
	}
	tests := []struct {
		name   string
		set    func(g *Grant)
		client netip.AddrPort
	}{
		{"plain", func(g *Grant) {}, client},
		{"no user", func(g *Grant) { g.User, g.account = "", "" }, client},
		{"user not the account", func(g *Grant) { g.User = "alice@corp" }, client},
		{"user the account is not", func(g *Grant) { g.User = "" }, client},
		{"socks", func(g *Grant) { g.proto, g.status, g.class = accesslog.ProtoSOCKS5, 0, 200 }, client},
		{"other method", func(g *Grant) { g.method = "UDP ASSOCIATE" }, client},
		{"no method", func(g *Grant) { g.method, g.target = "", nil }, client},
		{"ipv6 client with zone", func(g *Grant) {}, netip.MustParseAddrPort("[fe80::1%eth0]:5000")},
		{"every optional field", func(g *Grant) {
			g.reason = accesslog.ReasonSNIMismatch
			g.source = netip.MustParseAddrPort("203.0.113.1:50000")
			g.route, g.parent = rt, parent
			g.audited = "would-block"
			g.sni = "example.com"
			g.intercepted = true
			g.original = netip.MustParseAddrPort("198.51.100.10:443")
		}, client},
		{"sni only", func(g *Grant) { g.sni = "[not-tls]" }, client},
		{"no rule no upstream", func(g *Grant) { g.Rule, g.upstream, g.status, g.class = "", netip.AddrPort{}, 0, 0 }, client},
	}
	formats := []accesslog.Config{
		{Format: accesslog.FormatText},
		{Format: accesslog.FormatJSON},
		{Format: accesslog.FormatSquid},
		{Format: accesslog.FormatCommon},
		{Format: accesslog.FormatCombined},
		{Format: accesslog.FormatTemplate, Template: "{squid} {reason} {source} {route} {parent} {would_deny} {sni} {intercepted} {orig_dst} {listener}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &Policy{Listener: "front"}
			s := &Session{p: p, client: tt.client, rctx: context.Background()}
			g := &Grant{s: s, start: start}
			base(g)
			tt.set(g)
			// What handOver kept before: the grant's record, with the
			// grant's reason so far.
			want := g.record(0, 0)
			want.Reason = g.reason
			et := &engineTunnel{p: p, account: g.account}
			var tr tunnelRecord
			g.tunnelRecord(&tr, g.account)
			got := tr.record(et)
			want.Duration, got.Duration = time.Second, time.Second
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("the tunnel's record is\n%+v\nwant\n%+v", got, want)
			}
			got.BytesUp, got.BytesDown, want.BytesUp, want.BytesDown = 10, 20, 10, 20
			for _, cfg := range formats {
				var b bytes.Buffer
				cfg.Writer = &b
				l, err := accesslog.New(cfg)
				if err != nil {
					t.Fatal(err)
				}
				l.Log(&want)
				l.Log(&got)
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
				lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
				if len(lines) != 2 || lines[0] != lines[1] {
					t.Errorf("%s: the lines of the grant's record and of the tunnel's differ:\n%s", cfg.Format, b.String())
				}
			}
		})
	}
}
